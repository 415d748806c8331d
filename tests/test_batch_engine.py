"""The batch engine and the adapters over it: seeding, the public step path, carrying on, hardened edges."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from team_capture_helpers import TOOLS, agent_action, idle_actions, random_actions

import arena_envs  # noqa: F401
from arena_envs import team_capture_v0
from arena_envs.batch import Batch, reset_mask, world_seeds
from arena_envs.envs import ArenaEnv, ArenaVectorEnv
from arena_envs.foraging import Foraging
from arena_envs.world import MOVE_TO, NO_TOOL, ToolActions
from arena_envs.wrappers.sb3 import Sb3VecEnv


def generator_states(batch: Batch) -> list:
    return [None if rng is None else rng.bit_generator.state for rng in batch.rngs]


# -- the engine ------------------------------------------------------------------------------


def test_world_i_of_seed_s_is_a_single_world_of_seed_s_plus_i():
    batch, single = Batch(Foraging(), 4), Batch(Foraging(), 1)
    batch.reset(seeds=world_seeds(7, 4))
    for i in range(4):
        single.reset(seeds=[7 + i])
        for key, value in batch.observe().items():
            np.testing.assert_array_equal(value[i], single.observe()[key][0], err_msg=key)


@pytest.mark.parametrize("bad", [-1, 1.5, "7", True])
def test_a_bad_seed_changes_no_world(bad):
    batch = Batch(Foraging(), 3)
    batch.reset(seeds=[1, 2, 3])
    before = generator_states(batch), {k: v.copy() for k, v in batch.observe().items()}
    with pytest.raises((ValueError, TypeError, gym.error.Error)):
        batch.reset(seeds=[10, bad, 30])
    assert generator_states(batch) == before[0]
    for key, value in batch.observe().items():
        np.testing.assert_array_equal(value, before[1][key], err_msg=key)


@pytest.mark.parametrize("seed, message", [([1, 2], "expected 3 seeds"), ("12", "seed must be"),
                                           (True, "seed must be")])
def test_world_seeds_refuse_what_is_not_one_seed_per_world(seed, message):
    with pytest.raises(ValueError, match=message):
        world_seeds(seed, 3)


@pytest.mark.parametrize("mask", [np.ones(2, bool), np.zeros(3, bool), np.ones(3, int)])
def test_reset_masks_are_checked(mask):
    with pytest.raises(ValueError, match="reset_mask"):
        reset_mask({"reset_mask": mask}, 3)


def test_a_vector_reset_with_one_bad_seed_leaves_every_world_as_it_was():
    envs = gym.make_vec("arena_envs/Foraging-v0", num_envs=3)
    obs, _ = envs.reset(seed=[4, 5, 6])
    with pytest.raises(Exception, match="[Ss]eed"):
        envs.reset(seed=[40, -5, 60])
    again, _ = envs.reset(seed=[4, 5, 6])
    for key, value in obs.items():
        np.testing.assert_array_equal(again[key], value)


def test_masked_steps_leave_the_other_worlds_alone():
    batch = Batch(Foraging(), 3)
    batch.reset(seeds=[1, 2, 3])
    before = {k: v.copy() for k, v in batch.observe().items()}
    actions = ToolActions.idle((3, 1))
    actions.tool[:] = MOVE_TO
    actions.target_x[:], actions.target_z[:] = 5.0, 5.0
    batch.step(actions, np.array([False, True, False]))
    after = batch.observe()
    for key in before:
        np.testing.assert_array_equal(after[key][[0, 2]], before[key][[0, 2]], err_msg=key)
    assert not np.array_equal(after["agent"][1], before["agent"][1])


# -- the public step path --------------------------------------------------------------------


def test_every_env_form_steps_with_decoded_tool_actions_through_its_wrappers():
    env = gym.make("arena_envs/Foraging-v0")  # TimeLimit, OrderEnforcing, PassiveEnvChecker around ArenaEnv
    env.reset(seed=0)
    _, _, _, _, info = env.step(ToolActions.idle((1, 1)))
    assert isinstance(env.unwrapped, ArenaEnv) and "score" in info
    envs = gym.make_vec("arena_envs/Crafting-v0", num_envs=2)
    envs.reset(seed=0)
    assert envs.step(ToolActions.idle((2, 1)))[1].shape == (2,)
    team = team_capture_v0.parallel_env(agents_per_team=2)
    team.reset(seed=0)
    assert set(team.step(ToolActions.idle((1, 4)))[1]) == set(team.possible_agents)


def test_team_capture_is_registered_like_the_other_scenarios():
    envs = gym.make_vec("arena_envs/TeamCapture-v0", num_envs=2, agents_per_team=2)
    twin = team_capture_v0.vector_env(num_envs=2, agents_per_team=2)
    assert isinstance(envs, ArenaVectorEnv) and envs.agents == twin.agents
    rng = np.random.default_rng(0)
    obs, _ = envs.reset(seed=3)
    twin_obs, _ = twin.reset(seed=3)
    for _ in range(20):
        batch = random_actions(rng, (2, 4), 2)
        obs, reward, *_ = envs.step(batch)
        twin_obs, twin_reward, *_ = twin.step(batch)
        np.testing.assert_array_equal(reward, twin_reward)
    np.testing.assert_array_equal(obs["agent"], twin_obs["agent"])


def test_every_scenario_reports_success_and_score():
    for env_id in ("arena_envs/Foraging-v0", "arena_envs/Crafting-v0", "arena_envs/TeamCapture-v0"):
        _, info = gym.make_vec(env_id, num_envs=2).reset(seed=0)
        assert info["success"].dtype == bool and info["score"].shape == (2,), env_id


# -- an agent given no new command carries on ------------------------------------------------


def test_an_agent_left_out_of_a_parallel_step_keeps_walking_and_idle_stops_it():
    env = team_capture_v0.parallel_env(agents_per_team=1)
    env.reset(seed=0)
    walk = agent_action(idle_actions((1, 2)), 0, 0)
    walk["tool"] = np.int64(TOOLS["move_to"])
    walk["move_to"] = np.array([20.0, 20.0, 1.0], np.float32)
    env.step({"blue_agent_1": walk})
    positions = [env.unwrapped.world.x[0, 0].copy()]
    for _ in range(3):
        env.step({})  # blue is left out: it carries on
        positions.append(env.unwrapped.world.x[0, 0].copy())
    assert all(b > a for a, b in zip(positions, positions[1:], strict=False))
    assert env.unwrapped.world.last_tool[0, 0] == TOOLS["move_to"]  # its last command is still the record
    env.step({"blue_agent_1": {**walk, "tool": np.int64(TOOLS["idle"])}})
    stopped = env.unwrapped.world.x[0, 0].copy()
    env.step({})
    assert env.unwrapped.world.x[0, 0] == stopped


def test_no_tool_is_not_idle_in_the_core():
    batch = Batch(Foraging(), 2)
    batch.reset(seeds=[0, 0])
    walk = ToolActions.idle((2, 1))
    walk.tool[:], walk.target_x[:], walk.target_z[:] = MOVE_TO, 20.0, -20.0
    batch.step(walk)
    carry_on, idle = ToolActions.none((2, 1)), ToolActions.idle((2, 1))
    carry_on.tool[1] = idle.tool[1]
    assert carry_on.tool[0, 0] == NO_TOOL
    batch.step(carry_on)
    assert batch.state.moving.tolist() == [[True], [False]]


# -- hardened edges (issue 16: items 8 and 9) -------------------------------------------------


def test_aec_refuses_a_bad_action_when_it_is_given_and_goes_on():
    env = team_capture_v0.env(agents_per_team=1, max_cycles=5)
    env.reset(seed=0)
    first = env.agent_selection
    with pytest.raises(ValueError, match=first):
        env.step({"tool": "oops"})
    assert env.agent_selection == first  # nothing was stored: the agent tries again
    for _ in range(2 * 5):
        agent = env.agent_selection
        _, _, terminated, truncated, _ = env.last()
        env.step(None if terminated or truncated else env.action_space(agent).sample())
    assert all(env.truncations.values()) or not env.agents


def test_aec_refuses_a_real_action_for_a_finished_agent_and_then_takes_none():
    env = team_capture_v0.env(agents_per_team=1, max_cycles=2)
    env.reset(seed=0)
    while not any(env.truncations.values()):
        env.step(env.action_space(env.agent_selection).sample())
    agent = env.agent_selection
    with pytest.raises(ValueError, match="only valid action is None"):
        env.step(env.action_space(agent).sample())
    env.step(None)  # the bookkeeping survived the refusal
    assert agent not in env.agents


@pytest.mark.parametrize("make_actions, message", [
    (lambda n: np.zeros((n, 7), np.float32) + 0.5, "whole numbers"),
    (lambda n: np.full((n, 7), np.nan), "finite"),
    (lambda n: np.array([[None] * 7] * n, dtype=object), "numbers"),
    (lambda n: np.zeros((n, 3), np.int64), "shape"),
    (lambda n: np.full((n, 7), 99, np.int64), "out of range"),
    (lambda n: [[0] * 7] * (n - 1) + [[0] * 6], "rectangular|numbers"),
])
@pytest.mark.parametrize("env_id", ["arena_envs/Foraging-v0", "team_capture_v0"])
def test_sb3_actions_are_checked_before_anything_moves(env_id, make_actions, message):
    venv = Sb3VecEnv.make(env_id, num_envs=2)
    venv.reset()
    before = {k: v.copy() for k, v in venv.envs.unwrapped.state.arrays()}
    with pytest.raises(ValueError, match=message):
        venv.step(make_actions(venv.num_envs))
    for key, value in venv.envs.unwrapped.state.arrays():
        np.testing.assert_array_equal(value, before[key], err_msg=key)
    venv.step(np.zeros((venv.num_envs, 7), np.int64))  # still usable


@pytest.mark.parametrize("actions", [None, [1, 2, 3], "idle"])
def test_team_capture_vector_env_refuses_what_is_not_a_batch_of_actions(actions):
    envs = team_capture_v0.vector_env(num_envs=2, agents_per_team=1)
    envs.reset(seed=0)
    with pytest.raises(ValueError):
        envs.step(actions)


def test_carrying_on_repeats_neither_a_query_nor_a_message():
    env = team_capture_v0.parallel_env(agents_per_team=2, message_drop_prob=0.0)
    env.reset(seed=0)
    talk = agent_action(idle_actions((1, 4)), 0, 0)
    talk["tool"], talk["send_message"] = np.int64(TOOLS["send_message"]), np.array([3, 0])
    env.step({"blue_agent_1": talk})
    world = env.unwrapped.world
    assert world.extra["inbox_token"][0, 1, 0] == 3 and world.extra["inbox_age"][0, 1, 0] == 0  # blue_agent_2 heard it
    env.step({})  # blue_agent_1 carries on: its message is not sent again, so it ages
    assert world.extra["inbox_age"][0, 1, 0] == 1 and not world.acted.any()
    batch = Batch(Foraging(num_resources=4), 1)
    batch.reset(seeds=[0])
    query = ToolActions.idle((1, 1))
    query.tool[:], query.query_radius[:] = TOOLS["query_world"], 50.0
    batch.step(query)
    assert batch.observe()["resources"][0, :, 1].any()  # in the query result this tick
    batch.step(ToolActions.none((1, 1)))
    assert not batch.observe()["resources"][0, :, 1].any()  # not again while carrying on


def test_carrying_on_through_a_craft_is_not_another_attempt():
    from arena_envs.crafting import Crafting

    batch = Batch(Crafting(), 1)
    batch.reset(seeds=[0])
    s, scenario = batch.state, batch.scenario
    furnace = scenario.slots.st.start + scenario.params.station_types.index("furnace")
    s.x[0, 0], s.z[0, 0] = s.ent_x[0, furnace] + 1.0, s.ent_z[0, furnace]
    items = scenario.params.item_names
    s.inventory[0, 0, items.index("iron_ore")] = s.inventory[0, 0, items.index("coal")] = 1
    craft = ToolActions.idle((1, 1))
    craft.tool[:] = TOOLS["craft"]
    craft.recipe[:] = [r.name for r in scenario.params.recipes].index("iron_ingot")
    craft.station[:] = scenario.params.station_types.index("furnace")
    batch.step(craft)
    for _ in range(40):
        batch.step(ToolActions.none((1, 1)))
    info = batch.scenario.info(s)
    assert info["items_crafted"][0] == 1 and info["craft_attempts"][0] == 1
