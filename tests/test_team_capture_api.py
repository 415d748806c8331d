"""team_capture_v0's PettingZoo API: the released API tests, module conventions, spaces, arguments."""

from __future__ import annotations

import warnings

import numpy as np
import pettingzoo
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space
from pettingzoo.test import api_test, max_cycles_test, parallel_api_test
from pettingzoo.utils.conversions import parallel_to_aec_wrapper
from team_capture_helpers import TOOLS, idle_actions

import arena_envs  # noqa: F401  (registers the environments)
from arena_envs import team_capture_v0
from arena_envs.team_capture_v0 import TeamCaptureParallelEnv, TeamCaptureVectorEnv


@pytest.fixture(autouse=True)
def quiet():
    # PettingZoo's advice for Box observations and numbered agent names is not an error
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.mark.parametrize("kwargs", [{}, {"agents_per_team": 1}, {"agents_per_team": 3, "num_obstacles": 4}])
def test_parallel_api_test_passes(kwargs):
    parallel_api_test(team_capture_v0.parallel_env(**kwargs), num_cycles=300)


@pytest.mark.parametrize("kwargs", [{}, {"agents_per_team": 4, "max_cycles": 120}])
def test_api_test_passes_on_the_aec_env(kwargs):
    api_test(team_capture_v0.env(**kwargs), num_cycles=150)


def test_max_cycles_test_passes():
    max_cycles_test(team_capture_v0)


def test_module_follows_pettingzoo_conventions():
    par = team_capture_v0.parallel_env()
    assert isinstance(par, pettingzoo.ParallelEnv) and isinstance(par, TeamCaptureParallelEnv)
    assert par.metadata["name"] == "team_capture_v0" and par.render_mode is None
    raw = team_capture_v0.raw_env()
    assert isinstance(raw, parallel_to_aec_wrapper) and isinstance(raw.unwrapped, TeamCaptureParallelEnv)
    aec = team_capture_v0.env()
    assert isinstance(aec, pettingzoo.AECEnv) and isinstance(aec.unwrapped, TeamCaptureParallelEnv)
    assert aec.metadata["name"] == "team_capture_v0"
    assert isinstance(team_capture_v0.vector_env(num_envs=2), TeamCaptureVectorEnv)
    with pytest.raises(ValueError, match="render"):
        team_capture_v0.parallel_env(render_mode="window")
    with pytest.raises(ValueError, match="render"):
        team_capture_v0.vector_env(num_envs=2, render_mode="text")


def test_pettingzoo_registry_makes_both_forms():
    par = pettingzoo.make("parallel", "arena_envs/team_capture_v0", agents_per_team=3)
    assert isinstance(par, TeamCaptureParallelEnv) and len(par.possible_agents) == 6
    aec = pettingzoo.make("aec", "arena_envs/team_capture_v0", max_cycles=7)
    assert isinstance(aec.unwrapped, TeamCaptureParallelEnv) and aec.unwrapped.max_cycles == 7


@pytest.mark.parametrize("n", [1, 2, 8])
def test_agents_are_named_by_team(n):
    env = team_capture_v0.parallel_env(agents_per_team=n)
    names = [f"blue_agent_{i}" for i in range(1, n + 1)] + [f"red_agent_{i}" for i in range(1, n + 1)]
    assert env.possible_agents == names and env.agents == []
    env.reset(seed=0)
    assert env.agents == names and env.num_agents == 2 * n and env.max_num_agents == 2 * n
    assert team_capture_v0.vector_env(num_envs=1, agents_per_team=n).agents == names


def test_spaces_are_the_same_object_on_every_call_and_one_per_agent():
    env = team_capture_v0.parallel_env()
    for agent in env.possible_agents:
        assert env.observation_space(agent) is env.observation_space(agent)
        assert env.action_space(agent) is env.action_space(agent)
    a, b = env.action_space("blue_agent_1"), env.action_space("red_agent_1")
    assert a == b and a is not b  # equal, but seeding one leaves the other's stream alone


def test_observation_space_is_the_documented_table():
    n = 3
    env = team_capture_v0.parallel_env(agents_per_team=n, num_obstacles=2)
    space = env.observation_space("red_agent_2")
    expected = {"agent": (7,), "allies": (n, 4), "enemies": (n, 4), "points": (5, 7), "messages": (n, 4),
                "obstacles": (2, 4), "score": (2,), "last_action": (2,), "time_left": (1,)}
    assert {k: s.shape for k, s in space.spaces.items()} == expected
    for k, s in space.spaces.items():
        if k != "last_action":
            assert isinstance(s, spaces.Box) and s.dtype == np.float32, k
    assert space["last_action"].nvec.tolist() == [7, 7]
    assert space["enemies"].high[0].tolist() == [1, 20, 20, 20] and space["allies"].high[0].tolist() == [1, 15, 15, 15]
    assert space["messages"].high[0].tolist() == [n, 15, 1200, 1]
    obs, infos = env.reset(seed=0)
    for agent in env.agents:
        assert space.contains(obs[agent])
        assert infos[agent] == {"success": False, "score": 0.0, "blue_score": 0.0, "red_score": 0.0,
                                "blue_points": 0, "red_points": 0}
    blue, red = obs["blue_agent_1"], obs["red_agent_1"]
    assert blue["agent"][6] == 0 and red["agent"][6] == 1
    assert blue["time_left"].tolist() == [1200.0] and blue["score"].tolist() == [0.0, 0.0]
    assert (blue["points"][:, 3:] == 0).all()  # all neutral, no progress
    assert (blue["messages"] == 0).all() and (blue["allies"][0] == 0).all()  # nothing received; own row empty


def test_action_space_is_the_structured_tool_action_with_teammate_targets():
    space = team_capture_v0.parallel_env(agents_per_team=3, message_vocab_size=9).action_space("blue_agent_1")
    assert set(space.spaces) == {"tool", "move_to", "collect", "craft", "query_world", "send_message"}
    assert space["tool"].n == 7
    assert space["move_to"].low.tolist() == [-30, -30, 0] and space["move_to"].high.tolist() == [30, 30, 2]
    assert space["send_message"].nvec.tolist() == [9, 4]  # token, target 0 = all or teammate 1..3


def test_spawns_are_mirrored_and_on_their_sides():
    env = team_capture_v0.parallel_env(agents_per_team=4)
    obs, _ = env.reset(seed=5)
    for i in range(1, 5):
        blue, red = obs[f"blue_agent_{i}"]["agent"], obs[f"red_agent_{i}"]["agent"]
        assert -28 <= blue[0] <= -22 and abs(blue[1]) <= 3
        np.testing.assert_array_equal(red[:2], -blue[:2])


def test_state_is_the_global_view():
    env = team_capture_v0.parallel_env(agents_per_team=2)
    obs, _ = env.reset(seed=1)
    state = env.state()
    assert state.shape == env.state_space.shape == (2 * 2 * 3 + 5 * 4 + 3,) and env.state_space.contains(state)
    for i, agent in enumerate(env.possible_agents):
        np.testing.assert_array_equal(state[3 * i:3 * i + 2], obs[agent]["agent"][:2])
    assert state[-3:].tolist() == [0.0, 0.0, 1200.0]
    assert team_capture_v0.raw_env().state_space == env.state_space


def test_vector_env_spaces_are_batched_per_agent_spaces():
    envs = team_capture_v0.vector_env(num_envs=5, agents_per_team=2)
    par = team_capture_v0.parallel_env(agents_per_team=2)
    assert envs.single_observation_space == batch_space(par.observation_space("blue_agent_1"), 4)
    assert envs.single_action_space == batch_space(par.action_space("blue_agent_1"), 4)
    assert envs.observation_space == batch_space(envs.single_observation_space, 5)
    assert envs.action_space == batch_space(envs.single_action_space, 5)
    assert envs.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    envs.action_space.seed(0)
    obs, info = envs.reset(seed=0)
    assert envs.observation_space.contains(obs)
    for _ in range(30):
        obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
        assert envs.observation_space.contains(obs)
        assert reward.shape == terminated.shape == truncated.shape == (5, 4)
        assert reward.dtype == np.float64 and terminated.dtype == bool
        for k in ("blue_score", "red_score", "blue_points", "red_points"):
            assert info[k].shape == (5,) and info["_" + k].all()
    assert envs.global_state().shape == (5,) + envs.scenario.state_space.shape


def test_observations_are_contiguous_arrays_that_do_not_share_steps():
    envs = team_capture_v0.vector_env(num_envs=3)
    first, _ = envs.reset(seed=0)
    kept = {k: v.copy() for k, v in first.items()}
    action = idle_actions((3, 4))
    action["tool"][:] = TOOLS["move_to"]
    second, *_ = envs.step(action)
    for k in first:
        assert first[k].flags.c_contiguous and second[k].flags.c_contiguous
        np.testing.assert_array_equal(first[k], kept[k])  # the next step wrote elsewhere
    assert not np.array_equal(first["agent"], second["agent"])


def test_parallel_env_step_after_the_end_returns_nothing():
    env = team_capture_v0.parallel_env(max_cycles=2)
    env.reset(seed=0)
    for _ in range(2):
        out = env.step({})
    assert all(out[3].values()) and env.agents == []
    assert env.step({}) == ({}, {}, {}, {}, {})


@pytest.mark.parametrize("kwargs", [
    {"agents_per_team": 0}, {"agents_per_team": 9}, {"max_cycles": 0}, {"capture_radius": 0.0},
    {"capture_ticks": 0}, {"message_drop_prob": 1.5}, {"message_drop_prob": -0.1}, {"message_vocab_size": 0},
    {"num_obstacles": 3}, {"win_score": 0.0}, {"spawn_distance": 29.0}, {"point_names": ("A",)},
    {"capture_points": ((0.0, 40.0),), "point_names": ("far",)}, {"enemy_radius": -1.0},
])
def test_nonsense_arguments_are_refused(kwargs):
    with pytest.raises(ValueError):
        team_capture_v0.parallel_env(**kwargs)
    with pytest.raises(ValueError):
        team_capture_v0.vector_env(num_envs=2, **kwargs)


def test_every_number_is_an_argument():
    env = team_capture_v0.parallel_env(agents_per_team=1, max_cycles=50, half_size=20.0, spawn_distance=15.0,
                                       capture_points=((5.0, 5.0), (-5.0, -5.0)), point_names=("X", "Y"),
                                       ally_radius=5.0, enemy_radius=7.0, message_vocab_size=4)
    space = env.observation_space("blue_agent_1")
    assert space["points"].shape == (2, 7) and space["enemies"].high[0, 3] == 7.0
    assert env.action_space("red_agent_1")["move_to"].high.tolist() == [20, 20, 2]
    obs, _ = env.reset(seed=0)
    assert obs["blue_agent_1"]["time_left"].tolist() == [50.0]
    blue = obs["blue_agent_1"]
    np.testing.assert_allclose(blue["points"][0, :2], np.array([5.0, 5.0]) - blue["agent"][:2], rtol=1e-6)
