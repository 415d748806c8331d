"""Foraging-v0's Gymnasium API: registration, ``check_env``, the documented spaces."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from conftest import ENV_ID, action_row, make_single, make_vec, policy_actions
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env

from arena_envs.envs import ArenaEnv, ArenaVectorEnv
from arena_envs.foraging import Foraging


@pytest.mark.parametrize("layout", ["classic", "random"])
def test_check_env_passes(layout):
    env = make_single(layout=layout)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. the advice to normalise Box action spaces
        check_env(env.unwrapped)
    env.close()


@pytest.mark.parametrize("layout", ["classic", "random"])
def test_check_env_passes_with_other_sizes(layout):
    env = make_single(layout=layout, num_resources=3, num_hazards=0, num_obstacles=0, half_size=10.0,
                      max_ticks=20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env.unwrapped)


def test_registration_gives_the_native_envs():
    env = gym.make(ENV_ID)
    assert isinstance(env.unwrapped, ArenaEnv) and isinstance(env.unwrapped.scenario, Foraging)
    assert env.spec.id == ENV_ID
    envs = gym.make_vec(ENV_ID, num_envs=4)
    assert isinstance(envs.unwrapped, ArenaVectorEnv) and isinstance(envs.unwrapped.scenario, Foraging)
    assert isinstance(envs.unwrapped, gym.vector.VectorEnv)
    assert not isinstance(envs, gym.vector.SyncVectorEnv)


@pytest.mark.parametrize("layout, sizes", [("random", (9, 4, 10)), ("classic", (7, 2, 12))])
def test_observation_space_is_the_documented_table(layout, sizes):
    R, H, O = sizes
    env = make_single(layout=layout)
    space = env.observation_space
    assert isinstance(space, spaces.Dict)
    expected = {"agent": (7,), "resources": (R, 8), "hazards": (H, 7), "obstacles": (O, 4), "inventory": (3,),
                "last_action": (2,), "time_left": (1,)}
    assert {k: s.shape for k, s in space.spaces.items()} == expected
    for k, s in space.spaces.items():
        if k != "last_action":
            assert isinstance(s, spaces.Box) and s.dtype == np.float32, k
    assert isinstance(space["last_action"], spaces.MultiDiscrete)
    assert space["last_action"].nvec.tolist() == [7, 7]
    assert space["time_left"].high[0] == 600
    obs, info = env.reset(seed=0)
    assert space.contains(obs)
    assert set(info) == {"success", "score", "resources_collected", "resources_remaining", "damage_taken", "health"}
    placed = int(env.unwrapped.state.res_total[0])
    assert placed == R if layout == "classic" else 1 <= placed <= R
    assert info == {"success": False, "score": 0.0, "resources_collected": 0, "resources_remaining": placed,
                    "damage_taken": 0.0,
                    "health": 100.0}
    assert obs["agent"][2:5].tolist() == [100.0, 100.0, 0.0]
    assert obs["time_left"].tolist() == [600.0] and obs["inventory"].tolist() == [0.0, 0.0, 0.0]


def test_action_space_is_the_structured_tool_action():
    space = make_single().action_space
    assert isinstance(space, spaces.Dict)
    assert set(space.spaces) == {"tool", "move_to", "collect", "craft", "query_world", "send_message"}
    assert space["tool"].n == 7
    assert space["move_to"].low.tolist() == [-25, -25, 0] and space["move_to"].high.tolist() == [25, 25, 2]
    assert space["collect"].n == 9
    assert space["query_world"]["radius"].high.tolist() == [50.0]
    assert space["query_world"]["filter"].n == 5
    assert space["send_message"].nvec.tolist() == [16, 2]


def test_single_env_steps_with_sampled_actions_and_stays_in_space():
    env = make_single(max_ticks=30)
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    for _ in range(100):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs)
        assert isinstance(reward, float) and isinstance(terminated, bool) and isinstance(truncated, bool)
        assert all(isinstance(v, (int, float)) for v in info.values())
        if terminated or truncated:
            obs, _ = env.reset()


def test_vector_env_steps_with_sampled_actions_and_stays_in_space():
    envs = make_vec(6, max_ticks=25)
    envs.action_space.seed(1)
    obs, _ = envs.reset(seed=1)
    for _ in range(60):
        obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
        assert envs.observation_space.contains(obs)
        assert reward.shape == terminated.shape == truncated.shape == (6,)
        for k in ("score", "resources_collected", "resources_remaining", "damage_taken", "health"):
            assert info[k].shape == (6,) and info["_" + k].all()


def test_world_params_are_constructor_arguments():
    env = make_single(half_size=12.0, perception_radius=4.0, max_ticks=50, num_resources=5, num_hazards=1,
                      num_obstacles=3)
    p = env.unwrapped.scenario.params
    assert (p.half_size, p.perception_radius, p.max_ticks) == (12.0, 4.0, 50)
    assert env.observation_space["resources"].shape == (5, 8)
    assert env.action_space["move_to"].high.tolist()[:2] == [12.0, 12.0]
    obs, _ = env.reset(seed=3)
    assert obs["time_left"].tolist() == [50.0]
    for _ in range(30):
        obs, *_ = env.step(action_row(policy_actions(np.random.default_rng(0), {k: v[None] for k, v in obs.items()},
                                                     12.0), 0))
        assert np.abs(obs["agent"][:2]).max() <= 11.5


@pytest.mark.parametrize("kwargs", [{"layout": "maze"}, {"num_resources": 0}, {"max_ticks": 0},
                                    {"num_hazards": -1}])
def test_nonsense_arguments_are_refused(kwargs):
    with pytest.raises(ValueError):
        make_single(**kwargs)
    with pytest.raises(ValueError):
        make_vec(2, **kwargs)


def test_vector_env_needs_at_least_one_env():
    with pytest.raises(ValueError):
        make_vec(0)
