"""Seeding: same seed, same trajectory; different seeds, different worlds; batch invariance.

Batch invariance (DESIGN §4): env ``i`` of ``make_vec(num_envs=B)`` reset with seed ``s``
behaves exactly like a single env reset with seed ``s + i``, through autoresets.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import (
    action_row,
    assert_snapshot_equal,
    assert_tree_equal,
    make_single,
    make_vec,
    obs_row,
    policy_actions,
    snapshot,
)


def single_trajectory(seed: int, steps: int, action_seed: int, **kwargs) -> list:
    """(obs, reward, terminated, truncated, info) of every step, resetting by hand at episode ends."""
    env = make_single(**kwargs)
    obs, info = env.reset(seed=seed)
    rng = np.random.default_rng(action_seed)
    out = [(obs, 0.0, False, False, info)]
    for _ in range(steps):
        batch = {k: v[None] for k, v in obs.items()}
        obs, reward, terminated, truncated, info = env.step(action_row(policy_actions(rng, batch), 0))
        out.append((obs, reward, terminated, truncated, info))
        if terminated or truncated:
            obs, info = env.reset()
            out.append((obs, 0.0, False, False, info))
    return out


def vector_trajectory(B: int, seed, steps: int, action_seed: int, **kwargs) -> tuple[list, dict]:
    envs = make_vec(B, **kwargs)
    obs, info = envs.reset(seed=seed)
    rng = np.random.default_rng(action_seed)
    out = [(obs, None, None, None, info)]
    for _ in range(steps):
        step = envs.step(policy_actions(rng, obs))
        obs = step[0]
        out.append(step)
    return out, snapshot(envs.unwrapped.state)


def assert_trajectories_equal(a: list, b: list) -> None:
    assert len(a) == len(b)
    for t, (x, y) in enumerate(zip(a, b, strict=True)):
        for part, (u, v) in enumerate(zip(x, y, strict=True)):
            assert_tree_equal(u, v, f"step {t} part {part}")


@pytest.mark.parametrize("layout", ["random", "classic"])
def test_single_env_same_seed_same_trajectory(layout):
    a = single_trajectory(42, 250, action_seed=7, layout=layout, max_ticks=60)
    b = single_trajectory(42, 250, action_seed=7, layout=layout, max_ticks=60)
    assert sum(1 for step in a if step[2] or step[3]) >= 3
    assert_trajectories_equal(a, b)


@pytest.mark.parametrize("layout", ["random", "classic"])
def test_vector_env_same_seed_same_trajectory(layout):
    a, state_a = vector_trajectory(5, 42, 250, action_seed=7, layout=layout, max_ticks=60)
    b, state_b = vector_trajectory(5, 42, 250, action_seed=7, layout=layout, max_ticks=60)
    assert_trajectories_equal(a, b)
    assert_snapshot_equal(state_a, state_b)


def test_reseeding_restarts_the_same_episode():
    env = make_single()
    first, info = env.reset(seed=3)
    for _ in range(20):
        env.step(env.action_space.sample())
    again, info_again = env.reset(seed=3)
    assert_tree_equal(again, first)
    assert info_again == info

    envs = make_vec(4)
    first, _ = envs.reset(seed=3)
    for _ in range(20):
        envs.step(envs.action_space.sample())
    again, _ = envs.reset(seed=3)
    assert_tree_equal(again, first)


def test_different_seeds_give_different_random_worlds():
    a, _ = make_single().reset(seed=1)
    b, _ = make_single().reset(seed=2)
    assert not np.array_equal(a["agent"], b["agent"])

    envs_a, envs_b = make_vec(6), make_vec(6)
    envs_a.reset(seed=100)
    envs_b.reset(seed=200)
    sa, sb = envs_a.unwrapped.state, envs_b.unwrapped.state
    for i in range(6):
        assert not np.array_equal(sa.ent_x[i], sb.ent_x[i]), f"env {i}"
        assert not np.array_equal(sa.obst_x[i], sb.obst_x[i]), f"env {i}"
        assert (sa.x[i], sa.z[i]) != (sb.x[i], sb.z[i])
    # and the worlds of one batch differ from each other
    assert len({sa.ent_x[i].tobytes() for i in range(6)}) == 6


def test_unseeded_resets_continue_the_generator():
    envs = make_vec(2)
    envs.reset(seed=10)
    first = envs.unwrapped.state.ent_x.copy()
    envs.reset()
    assert not np.array_equal(envs.unwrapped.state.ent_x, first)  # a new world, not the same one
    env = make_single()
    env.reset(seed=10)
    env.reset()
    np.testing.assert_array_equal(env.unwrapped.state.ent_x[0], envs.unwrapped.state.ent_x[0])


def test_a_list_of_seeds_seeds_each_env():
    envs = make_vec(3)
    obs, _ = envs.reset(seed=[5, 900, 31])
    for i, s in enumerate([5, 900, 31]):
        want, _ = make_single().reset(seed=s)
        assert_tree_equal(obs_row(obs, i), want, f"env {i}")
    with pytest.raises(ValueError):
        envs.reset(seed=[1, 2])


# -- batch invariance ---------------------------------------------------------------------


def assert_state_row_equal(vector_state, i: int, single_state, msg: str) -> None:
    row = {name: arr[i:i + 1] for name, arr in vector_state.arrays()}
    assert_snapshot_equal(row, dict(single_state.arrays()), msg=msg)


@pytest.mark.parametrize("B, layout, compared", [
    (3, "random", (0, 1, 2)),
    (3, "classic", (0, 1, 2)),
    # a bigger batch takes other code paths (e.g. line of sight gathers pairs instead of
    # testing every one): compare a few of its worlds
    (40, "random", (0, 1, 22, 39)),
])
def test_env_i_of_a_batch_behaves_like_a_single_env_seeded_s_plus_i(B, layout, compared):
    seed, T, steps = 1000, 100, 500
    envs = make_vec(B, layout=layout, max_ticks=T)
    singles = {i: make_single(layout=layout, max_ticks=T) for i in compared}
    obs, info = envs.reset(seed=seed)
    for i, env in singles.items():
        o, inf = env.reset(seed=seed + i)
        assert_tree_equal(obs_row(obs, i), o, f"reset env {i}")
        assert {k: info[k][i] for k in inf} == inf
    rng = np.random.default_rng(2024)
    pending = np.zeros(B, bool)
    resets = collected = hurt = 0
    for t in range(steps):
        action = policy_actions(rng, obs)
        obs, reward, terminated, truncated, info = envs.step(action)
        for i, env in singles.items():
            if pending[i]:  # NEXT_STEP: this step resets the env instead of stepping it
                o, inf = env.reset()
                r, te, tr = 0.0, False, False
                resets += 1
            else:
                o, r, te, tr, inf = env.step(action_row(action, i))
            where = f"step {t} env {i}"
            assert_tree_equal(obs_row(obs, i), o, where)
            assert reward[i] == r, where
            assert terminated[i] == te and truncated[i] == tr, where
            assert inf.keys() <= info.keys()
            for k, v in inf.items():
                assert info[k][i] == v, f"{where} info {k}"
            assert_state_row_equal(envs.unwrapped.state, i, env.unwrapped.state, where)
            collected += r > 0.5
            hurt += r < 0
        pending = terminated | truncated
    # the run covered what it claims to
    assert resets >= 4 * len(compared)
    assert collected > 0 and hurt > 0
