"""Seeding and batch invariance of team_capture_v0.

PettingZoo's released ``parallel_seed_test`` stops after one step, so the seed test here
plays whole episodes and compares every observation, reward, flag and info. Batch
invariance (DESIGN §4): world ``i`` of ``vector_env`` reset with seed ``s`` plays exactly
like ``parallel_env`` reset with seed ``s + i``, through autoresets.
"""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from team_capture_helpers import agent_action, copy_action, random_actions

from arena_envs import team_capture_v0
from arena_envs.scripted import ScriptedCaptureTeam
from arena_envs.team_capture import join_teams, split_teams

N = 2
A = 2 * N


def assert_tree_equal(got, want, path: str = "") -> None:
    """Exact equality of (nested dicts of) arrays and scalars, with the same keys and types."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), f"{path}: keys {list(got)} != {list(want)}"
        for k in want:
            assert_tree_equal(got[k], want[k], f"{path}.{k}")
    else:
        assert type(got) is type(want), f"{path}: {type(got)} != {type(want)}"
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want), err_msg=path, strict=True)


def play(seed: int, episodes: int, action_seed: int, scripted: bool = False, **kwargs) -> list:
    """Every (obs, rewards, terminations, truncations, infos, state) of ``episodes`` whole episodes."""
    env = team_capture_v0.parallel_env(agents_per_team=N, **kwargs)
    rng = np.random.default_rng(action_seed)
    blue = ScriptedCaptureTeam(env.scenario.params)
    out = []
    obs, infos = env.reset(seed=seed)
    for _ in range(episodes):
        out.append((obs, infos, env.state()))
        while env.agents:
            batch = random_actions(rng, (1, A), N)
            if scripted:  # blue plays to win, so episodes also end by score
                blue_obs = {k: np.stack([obs[a][k] for a in env.possible_agents[:N]])[None]
                            for k in obs["blue_agent_1"]}
                batch = join_teams(blue.act(blue_obs), split_teams(batch, N)[1])
            actions = {a: agent_action(batch, 0, i) for i, a in enumerate(env.possible_agents)}
            step = env.step(actions)
            out.append(step + (env.state(),))
            obs = step[0]
        obs, infos = env.reset()
    return out


def assert_plays_equal(a: list, b: list) -> None:
    assert len(a) == len(b)
    for t, (x, y) in enumerate(zip(a, b, strict=True)):
        for part, (u, v) in enumerate(zip(x, y, strict=True)):
            assert_tree_equal(u, v, f"step {t} part {part}")


@pytest.mark.parametrize("scripted, kwargs", [(False, {"max_cycles": 150}), (True, {})])
def test_same_seed_same_whole_episodes(scripted, kwargs):
    a = play(7, 2, action_seed=1, scripted=scripted, **kwargs)
    b = play(7, 2, action_seed=1, scripted=scripted, **kwargs)
    assert_plays_equal(a, b)
    ends = [step for step in a if len(step) == 6 and (any(step[2].values()) or any(step[3].values()))]
    assert len(ends) == 2
    if scripted:  # ended by the score, before the time limit
        assert all(all(step[2].values()) and not any(step[3].values()) for step in ends)
        assert len(a) < 2 * 1200
    else:
        assert all(all(step[3].values()) for step in ends)
    # messages were sent and delivered on the way
    assert any(step[0][agent]["messages"][:, 0].any() for step in a[1:40] for agent in step[0])


def test_different_seeds_give_different_episodes():
    a = play(7, 1, action_seed=1, max_cycles=20)
    b = play(8, 1, action_seed=1, max_cycles=20)
    assert not np.array_equal(a[0][0]["blue_agent_1"]["agent"], b[0][0]["blue_agent_1"]["agent"])


def test_reset_without_a_seed_continues_the_generator():
    env = team_capture_v0.parallel_env()
    first, _ = env.reset(seed=3)
    second, _ = env.reset()
    again = team_capture_v0.parallel_env()
    again.reset(seed=3)
    assert_tree_equal(again.reset()[0], second)
    assert not np.array_equal(first["red_agent_1"]["agent"], second["red_agent_1"]["agent"])


def parallel_twins(B: int, seed: int, **kwargs):
    envs = [team_capture_v0.parallel_env(agents_per_team=N, **kwargs) for _ in range(B)]
    return envs, [env.reset(seed=seed + i) for i, env in enumerate(envs)]


def assert_world_matches(obs, info, b: int, want_obs: dict, want_info: dict, agents: list[str]) -> None:
    for i, agent in enumerate(agents):
        assert_tree_equal({k: v[b, i] for k, v in obs.items()}, want_obs[agent], f"world {b} {agent}")
    for k, v in next(iter(want_info.values())).items():
        assert info[k][b].item() == v, f"world {b} info {k}"


@pytest.mark.parametrize("num_obstacles", [0, 4])
def test_vector_env_plays_like_parallel_envs_through_next_step_autoresets(num_obstacles):
    B, T, seed = 3, 35, 10
    envs = team_capture_v0.vector_env(num_envs=B, agents_per_team=N, max_cycles=T, num_obstacles=num_obstacles)
    obs, info = envs.reset(seed=seed)
    singles, firsts = parallel_twins(B, seed, max_cycles=T, num_obstacles=num_obstacles)
    for b, (o, i) in enumerate(firsts):
        assert_world_matches(obs, info, b, o, i, envs.agents)
    rng = np.random.default_rng(0)
    restarted = 0
    for _ in range(2 * T + 5):
        batch = random_actions(rng, (B, A), N)
        obs, reward, terminated, truncated, info = envs.step(copy_action(batch))
        for b, env in enumerate(singles):
            if not env.agents:  # the vector env reset this world instead of stepping it
                want_obs, want_info = env.reset()
                assert reward[b].tolist() == [0.0] * A and not terminated[b].any() and not truncated[b].any()
                restarted += 1
            else:
                want_obs, rewards, terms, truncs, want_info = env.step(
                    {a: agent_action(batch, b, i) for i, a in enumerate(env.possible_agents)})
                assert reward[b].tolist() == [rewards[a] for a in env.possible_agents]
                assert terminated[b].tolist() == [terms[a] for a in env.possible_agents]
                assert truncated[b].tolist() == [truncs[a] for a in env.possible_agents]
            assert_world_matches(obs, info, b, want_obs, want_info, envs.agents)
            np.testing.assert_array_equal(envs.global_state()[b], env.state())
    assert restarted == 2 * B


def test_same_step_autoreset_gives_the_final_observation_and_the_new_episode():
    B, T, seed = 2, 12, 4
    envs = team_capture_v0.vector_env(num_envs=B, agents_per_team=N, max_cycles=T,
                                      autoreset_mode=AutoresetMode.SAME_STEP)
    assert envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    envs.reset(seed=seed)
    singles, _ = parallel_twins(B, seed, max_cycles=T)
    rng = np.random.default_rng(2)
    for _ in range(T):
        batch = random_actions(rng, (B, A), N)
        obs, reward, terminated, truncated, info = envs.step(copy_action(batch))
        outs = [env.step({a: agent_action(batch, b, i) for i, a in enumerate(env.possible_agents)})
                for b, env in enumerate(singles)]
    assert truncated.all() and info["_final_obs"].all()
    for b, env in enumerate(singles):
        final = info["final_obs"][b]
        for i, agent in enumerate(envs.agents):
            assert_tree_equal({k: v[i] for k, v in final.items()}, outs[b][0][agent])
        assert info["final_info"]["blue_score"][b] == outs[b][4]["blue_agent_1"]["blue_score"]
        want_obs, want_info = env.reset()
        assert_world_matches(obs, info, b, want_obs, want_info, envs.agents)


def test_reset_mask_restarts_only_the_chosen_worlds():
    envs = team_capture_v0.vector_env(num_envs=3, agents_per_team=N)
    obs, _ = envs.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        obs, *_ = envs.step(random_actions(rng, (3, A), N))
    before = {k: v.copy() for k, v in obs.items()}
    obs, info = envs.reset(options={"reset_mask": np.array([False, True, False])})
    assert obs["time_left"][:, 0, 0].tolist() == [1180.0, 1200.0, 1180.0]
    for k in obs:
        np.testing.assert_array_equal(obs[k][[0, 2]], before[k][[0, 2]])
    assert info["_blue_score"].tolist() == [False, True, False]


def test_stepping_a_subset_leaves_the_other_worlds_alone():
    envs = team_capture_v0.vector_env(num_envs=4, agents_per_team=N)
    envs.reset(seed=1)
    twin = team_capture_v0.vector_env(num_envs=2, agents_per_team=N)
    twin.reset(seed=[1, 3])  # worlds 0 and 2 of the batch seeded 1
    idle = {name: array.copy() for name, array in envs.state.arrays()}
    rng = np.random.default_rng(5)
    active = np.array([True, False, True, False])
    for _ in range(60):
        batch = random_actions(rng, (4, A), N)
        envs.batch.step(envs.decode(copy_action(batch)), active)
        twin.batch.step(twin.decode({k: ({q: w[active] for q, w in v.items()} if isinstance(v, dict)
                                                         else v[active]) for k, v in batch.items()}))
    moved = dict(twin.state.arrays())
    for name, array in envs.state.arrays():
        np.testing.assert_array_equal(array[active], moved[name], err_msg=name)
        np.testing.assert_array_equal(array[~active], idle[name][~active], err_msg=name)
    assert envs.state.tick.tolist() == [60, 0, 60, 0]


def test_reset_sets_every_array_of_the_world_afresh():
    played = team_capture_v0.vector_env(num_envs=2, agents_per_team=N, num_obstacles=2)
    blue, red = ScriptedCaptureTeam(played.scenario.params), ScriptedCaptureTeam(played.scenario.params)
    obs, _ = played.reset(seed=6)
    for _ in range(120):  # points taken, messages in every inbox, agents on the move
        blue_obs, red_obs = split_teams(obs, N)
        obs, *_ = played.step(join_teams(blue.act(blue_obs), red.act(red_obs)))
    assert (played.state.extra["point_owner"] >= 0).any() and (played.state.extra["inbox_token"] >= 0).any()
    played.reset(seed=6)
    fresh = team_capture_v0.vector_env(num_envs=2, agents_per_team=N, num_obstacles=2)
    fresh.reset(seed=6)
    want = dict(fresh.state.arrays())
    for name, array in played.state.arrays():
        if name != "episode":  # the episode counter counts on
            np.testing.assert_array_equal(array, want[name], err_msg=name)
    assert played.state.episode.tolist() == [2, 2]
