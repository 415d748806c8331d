"""Seeding: same seed, same trajectory; batch invariance (DESIGN §4), with crafting going on.

The actions come from the scripted crafter mixed with seeded random actions, so the runs
collect, craft, wait out busy ticks, make swords, fail in every way and autoreset.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import action_row, assert_snapshot_equal, assert_tree_equal, obs_row, snapshot
from crafting_helpers import MixedPolicy, make_single, make_vec


def single_trajectory(seed: int, steps: int, **kwargs) -> list:
    env = make_single(**kwargs)
    policy = MixedPolicy(env, seed=7)
    obs, info = env.reset(seed=seed)
    out = [(obs, 0.0, False, False, info)]
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(policy(obs))
        out.append((obs, reward, terminated, truncated, info))
        if terminated or truncated:
            obs, info = env.reset()
            out.append((obs, 0.0, False, False, info))
    return out


def vector_trajectory(B: int, seed: int, steps: int, **kwargs) -> tuple[list, dict]:
    envs = make_vec(B, **kwargs)
    policy = MixedPolicy(envs, seed=7)
    obs, info = envs.reset(seed=seed)
    out = [(obs, info)]
    for _ in range(steps):
        step = envs.step(policy(obs))
        obs = step[0]
        out.append(step)
    return out, snapshot(envs.unwrapped.state)


@pytest.mark.parametrize("layout", ["classic", "random"])
def test_same_seed_same_trajectory(layout):
    a = single_trajectory(42, 450, layout=layout, max_ticks=200)
    b = single_trajectory(42, 450, layout=layout, max_ticks=200)
    assert sum(1 for step in a if step[2] or step[3]) >= 2
    assert max(step[4]["items_crafted"] for step in a) >= 1
    for t, (x, y) in enumerate(zip(a, b, strict=True)):
        for u, v in zip(x, y, strict=True):
            assert_tree_equal(u, v, f"step {t}")

    va, state_a = vector_trajectory(4, 42, 450, layout=layout, max_ticks=200)
    vb, state_b = vector_trajectory(4, 42, 450, layout=layout, max_ticks=200)
    for t, (x, y) in enumerate(zip(va, vb, strict=True)):
        for u, v in zip(x, y, strict=True):
            assert_tree_equal(u, v, f"vector step {t}")
    assert_snapshot_equal(state_a, state_b)


def test_seeds_give_different_random_worlds_and_the_same_classic_one():
    a, b = make_vec(4, layout="random"), make_vec(4, layout="random")
    a.reset(seed=100)
    b.reset(seed=200)
    sa, sb = a.unwrapped.state, b.unwrapped.state
    for i in range(4):
        assert not np.array_equal(sa.ent_x[i], sb.ent_x[i]) and (sa.x[i], sa.z[i]) != (sb.x[i], sb.z[i])
    assert len({sa.ent_x[i].tobytes() for i in range(4)}) == 4
    c, d = make_vec(2), make_vec(2)
    c.reset(seed=1)
    d.reset(seed=2)
    np.testing.assert_array_equal(c.unwrapped.state.ent_x, d.unwrapped.state.ent_x)


def test_reseeding_restarts_the_same_episode():
    env = make_single(layout="random")
    first, info = env.reset(seed=3)
    policy = MixedPolicy(env, seed=0)
    obs = first
    for _ in range(30):
        obs, *_ = env.step(policy(obs))
    again, info_again = env.reset(seed=3)
    assert_tree_equal(again, first)
    assert info_again == info


def assert_state_row_equal(vector_state, i: int, single_state, msg: str) -> None:
    row = {name: arr[i:i + 1] for name, arr in vector_state.arrays()}
    assert_snapshot_equal(row, dict(single_state.arrays()), msg=msg)


@pytest.mark.parametrize("B, layout, compared", [
    (3, "classic", (0, 1, 2)),
    (3, "random", (0, 1, 2)),
    (40, "random", (0, 17, 39)),
])
def test_env_i_of_a_batch_behaves_like_a_single_env_seeded_s_plus_i(B, layout, compared):
    seed, T, steps = 1000, 300, 620
    envs = make_vec(B, layout=layout, max_ticks=T)
    singles = {i: make_single(layout=layout, max_ticks=T) for i in compared}
    policy = MixedPolicy(envs, seed=2024, random_share=0.15)
    obs, info = envs.reset(seed=seed)
    for i, env in singles.items():
        o, inf = env.reset(seed=seed + i)
        assert_tree_equal(obs_row(obs, i), o, f"reset env {i}")
        assert {k: info[k][i] for k in inf} == inf
    pending = np.zeros(B, bool)
    resets = swords = crafted = busy = 0
    for t in range(steps):
        action = policy(obs)
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
            assert (reward[i], terminated[i], truncated[i]) == (r, te, tr), where
            assert {k: info[k][i] for k in inf} == inf, where
            assert_state_row_equal(envs.unwrapped.state, i, env.unwrapped.state, where)
            swords += te
            crafted += r > 0
            busy += o["last_action"][1] == 5
        pending = terminated | truncated
    # the run covered what it claims to
    assert resets >= 2 * len(compared)
    assert swords >= 1 and crafted >= 4 and busy >= 1
