"""The scripted crafter makes the goal item: on the classic layout, on 100 random layouts
(a solvability check of the generator too), and from a user's own recipe table."""

from __future__ import annotations

import numpy as np
from crafting_helpers import make_single, make_vec

from arena_envs.crafting import CraftingParams, Recipe
from arena_envs.scripted import ScriptedCrafter


def play_out(envs, crafter: ScriptedCrafter, seed: int = 0) -> dict[str, np.ndarray]:
    """One episode in every world of a batch: whether it made the goal, its length and final info."""
    obs, _ = envs.reset(seed=seed)
    B = envs.num_envs
    running, made, length = np.ones(B, bool), np.zeros(B, bool), np.zeros(B, int)
    final = {}
    centre = np.zeros(B, bool)
    while running.any():
        obs, reward, terminated, truncated, info = envs.step(crafter.act(obs))
        centre |= crafter.memory["asked_centre"] & running
        length += running
        done = running & (terminated | truncated)
        made[done] = terminated[done]
        for k in ("score", "waste", "items_crafted", "recipe_efficiency"):
            final.setdefault(k, np.zeros(B))[done] = info[k][done]
        running &= ~done
    return {"made": made, "length": length, "asked_centre": centre, **final}


def test_the_sword_on_the_classic_layout_single_env():
    env = make_single()
    crafter = ScriptedCrafter(env.unwrapped.scenario.params)
    obs, _ = env.reset(seed=0)
    for _ in range(900):
        obs, reward, terminated, truncated, info = env.step(crafter.act(obs))
        if terminated or truncated:
            break
    assert terminated and reward == 1.0 and obs["time_left"][0] > 600  # in under 300 ticks
    assert obs["inventory"][8] == 1  # the iron sword
    # a clean run: four crafts, all first attempts, nothing wasted
    assert info["items_crafted"] == 4 and info["recipe_efficiency"] == 100.0 and info["waste"] == 0.0
    assert info["score"] == 80.0


def test_the_sword_on_100_seeded_random_layouts():
    envs = make_vec(100, layout="random")
    result = play_out(envs, ScriptedCrafter(envs.unwrapped.scenario.params), seed=0)
    assert result["made"].all(), np.flatnonzero(~result["made"])
    assert result["length"].max() < 900
    assert (result["waste"] == 0).all() and (result["score"] == 80.0).all()


def test_a_world_larger_than_one_query_is_searched_from_its_centre():
    envs = make_vec(30, layout="random", half_size=30.0)
    result = play_out(envs, ScriptedCrafter(envs.unwrapped.scenario.params), seed=0)
    assert result["made"].all()
    assert result["asked_centre"].any()  # some first queries missed what was needed


def test_plans_from_a_users_recipe_table():
    """A shield from three planks (made two at a time) and iron ore: the chain, counts and
    stations all come from the table; the torch and meal of the default table are gone."""
    params = CraftingParams(
        recipes=(Recipe("plank", {"wood": 1}, "workbench", 5, count=2),
                 Recipe("boss", {"iron_ore": 1, "coal": 1}, "furnace", 10),
                 Recipe("shield", {"plank": 3, "boss": 1}, "anvil", 8),
                 Recipe("charcoal", {"wood": 1}, "furnace", 3)),
        goal="shield", layout="random",
        resource_counts={"wood": 3, "iron_ore": 1, "coal": 1, "stone": 2})
    envs = make_vec(20, params=params)
    result = play_out(envs, ScriptedCrafter(params), seed=5)
    assert result["made"].all()
    # two plank crafts (not three), the boss, the shield; no charcoal. The fourth plank is
    # waste: half a wood
    assert (result["items_crafted"] == 4).all() and (result["waste"] == 0.5).all()
