"""The native vector env: autoreset modes as Gymnasium documents them, and ``reset_mask``.

Gymnasium's own ``SyncVectorEnv`` over single Foraging envs is the reference for both
autoreset modes: it implements them exactly as documented.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from conftest import (
    TOOLS,
    World,
    assert_snapshot_equal,
    assert_tree_equal,
    copy_action,
    full_batch,
    make_single,
    make_vec,
    obs_row,
    policy_actions,
    snapshot,
)
from gymnasium.vector import AutoresetMode


def single_reset_obs(seed: int, resets: int, **kwargs):
    """The observation and info of a single env's ``resets``-th reset after ``reset(seed=seed)``."""
    env = make_single(**kwargs)
    obs, info = env.reset(seed=seed)
    for _ in range(resets):
        obs, info = env.reset()
    return obs, info


def assert_info_row(info: dict, i: int, want: dict, msg: str = "") -> None:
    for k, v in want.items():
        assert info[k][i] == v, f"{msg} info[{k!r}][{i}] = {info[k][i]} != {v}"


# -- metadata ------------------------------------------------------------------------------


def test_metadata_declares_the_autoreset_mode():
    assert make_vec(2).metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    envs = make_vec(2, autoreset_mode=AutoresetMode.SAME_STEP)
    assert envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    assert make_vec(2, autoreset_mode="NextStep").metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    # the class default is not changed by an instance in another mode
    assert make_vec(2).metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP


def test_vector_spaces_are_the_batched_single_spaces():
    envs = make_vec(5)
    assert envs.num_envs == 5
    assert envs.observation_space == gym.vector.utils.batch_space(envs.single_observation_space, 5)
    assert envs.action_space == gym.vector.utils.batch_space(envs.single_action_space, 5)
    single = make_single()
    assert envs.single_observation_space == single.observation_space
    assert envs.single_action_space == single.action_space


# -- NEXT_STEP --------------------------------------------------------------------------------


def test_next_step_returns_the_reset_observation_after_truncation():
    B, T, seed = 3, 4, 11
    envs = make_vec(B, max_ticks=T)
    twin = make_vec(B, max_ticks=T)
    obs, _ = envs.reset(seed=seed)
    twin.reset(seed=seed)
    rng = np.random.default_rng(0)
    for tick in range(1, T + 1):
        action = policy_actions(rng, obs)
        obs, reward, terminated, truncated, info = envs.step(action)
        twin.step(action)
        assert truncated.tolist() == [tick == T] * B and not terminated.any()

    # the step after: reset observation, reward 0, no flags, whatever the action
    act_a = full_batch(B, TOOLS["move_to"])
    act_a["move_to"][:] = (20.0, -20.0, 2.0)
    act_b = full_batch(B, TOOLS["collect"])
    obs, reward, terminated, truncated, info = envs.step(act_a)
    obs_b, reward_b, terminated_b, truncated_b, info_b = twin.step(act_b)
    assert reward.tolist() == [0.0] * B and not terminated.any() and not truncated.any()
    assert reward.dtype == np.float64 and terminated.dtype == bool and truncated.dtype == bool
    for i in range(B):
        want_obs, want_info = single_reset_obs(seed + i, 1, max_ticks=T)
        assert_tree_equal(obs_row(obs, i), want_obs, f"env {i}")
        assert_info_row(info, i, want_info, f"env {i}")
    assert obs["time_left"][:, 0].tolist() == [T] * B
    assert obs["last_action"].tolist() == [[TOOLS["idle"], 0]] * B
    assert_tree_equal(obs_b, obs)
    assert_tree_equal(info_b, info)
    assert_snapshot_equal(snapshot(twin.unwrapped.state), snapshot(envs.unwrapped.state))

    # and the episode then runs on as usual
    obs, reward, terminated, truncated, info = envs.step(act_a)
    assert obs["time_left"][:, 0].tolist() == [T - 1] * B
    assert obs["last_action"][:, 0].tolist() == [TOOLS["move_to"]] * B


def test_next_step_resets_only_the_envs_that_ended():
    B, T = 3, 4
    envs = make_vec(B, max_ticks=T)
    obs, _ = envs.reset(seed=5)
    idle = full_batch(B)
    envs.step(idle)
    envs.step(idle)
    envs.reset(options={"reset_mask": np.array([False, True, False])})  # env 1 starts over
    envs.step(idle)
    obs, reward, terminated, truncated, info = envs.step(idle)  # envs 0 and 2 reach tick 4, env 1 tick 2
    assert truncated.tolist() == [True, False, True]
    x1 = obs["agent"][1, 0]
    action = full_batch(B, TOOLS["move_to"])
    action["move_to"][:] = (x1 + 10.0 if x1 < 0 else x1 - 10.0, obs["agent"][1, 1], 2.0)
    obs, reward, terminated, truncated, info = envs.step(action)
    assert obs["time_left"][:, 0].tolist() == [T, 1, T]
    assert obs["last_action"][1].tolist() == [TOOLS["move_to"], 0]
    assert obs["agent"][1, 0] == pytest.approx(x1 + (1.0 if x1 < 0 else -1.0))  # env 1 was stepped
    assert obs["last_action"][0].tolist() == [TOOLS["idle"], 0]
    obs, reward, terminated, truncated, info = envs.step(idle)
    assert truncated.tolist() == [False, True, False]


def test_next_step_resets_after_termination():
    w = World(2, resources=1, hazards=2, obstacles=1)
    for b in range(2):
        w.resource(b, 0, 20.0, 20.0)
        w.hazard(b, 1, 0.0, 0.0, kind=1)  # fire
    w.state.health[0, 0] = 0.5
    obs, reward, terminated, truncated, info = w.step()
    assert terminated.tolist() == [True, False] and info["health"][0] == 0.0
    episode = w.state.episode.copy()
    obs, reward, terminated, truncated, info = w.step()
    assert reward[0] == 0.0 and not terminated[0] and not truncated[0]
    assert info["health"][0] == 100.0 and info["damage_taken"][0] == 0.0
    assert obs["time_left"][0, 0] == 600 and w.state.episode.tolist() == [episode[0] + 1, episode[1]]
    assert reward[1] == pytest.approx(-0.01)  # the other world went on burning


def test_next_step_matches_gymnasium_sync_vector_env():
    B, T, seed = 4, 15, 21
    native = make_vec(B, max_ticks=T)
    sync = gym.vector.SyncVectorEnv([lambda: make_single(max_ticks=T)] * B,
                                    autoreset_mode=AutoresetMode.NEXT_STEP)
    obs, info = native.reset(seed=seed)
    sobs, sinfo = sync.reset(seed=seed)
    assert_tree_equal(obs, sobs)
    assert_tree_equal(info, sinfo)
    rng = np.random.default_rng(1)
    ended = 0
    for _ in range(80):
        action = policy_actions(rng, obs)
        obs, reward, terminated, truncated, info = native.step(action)
        sobs, sreward, sterminated, struncated, sinfo = sync.step(copy_action(action))
        assert_tree_equal(obs, sobs)
        np.testing.assert_array_equal(reward, sreward)
        np.testing.assert_array_equal(terminated, sterminated)
        np.testing.assert_array_equal(truncated, struncated)
        assert_tree_equal(info, sinfo)
        ended += int((terminated | truncated).sum())
    assert ended >= 2 * B


# -- SAME_STEP --------------------------------------------------------------------------------


def test_same_step_returns_final_obs_and_info_and_the_reset_observation():
    B, T, seed = 3, 4, 8
    same = make_vec(B, max_ticks=T, autoreset_mode=AutoresetMode.SAME_STEP)
    nxt = make_vec(B, max_ticks=T)  # the next-step twin shows the final and the reset obs one step apart
    obs, _ = same.reset(seed=seed)
    nxt.reset(seed=seed)
    mask = {"reset_mask": np.array([False, True, False])}
    rng = np.random.default_rng(2)
    for tick in range(1, T):
        action = policy_actions(rng, obs)
        obs, reward, terminated, truncated, info = same.step(action)
        nxt.step(action)
        assert "final_obs" not in info and "final_info" not in info
        if tick == 1:
            same.reset(options=mask)
            obs, _ = nxt.reset(options=mask)

    action = policy_actions(rng, obs)
    obs, reward, terminated, truncated, info = same.step(action)
    final_obs, final_reward, final_terminated, final_truncated, final_info = nxt.step(action)
    reset_obs, _, _, _, reset_info = nxt.step(action)

    done = np.array([True, False, True])
    assert truncated.tolist() == done.tolist() and not terminated.any()
    np.testing.assert_array_equal(reward, final_reward)
    np.testing.assert_array_equal(truncated, final_truncated)
    fo = info["final_obs"]
    assert isinstance(fo, np.ndarray) and fo.dtype == object and fo.shape == (B,)
    np.testing.assert_array_equal(info["_final_obs"], done)
    np.testing.assert_array_equal(info["_final_info"], done)
    assert fo[1] is None
    for i in (0, 2):
        assert isinstance(fo[i], dict)
        assert_tree_equal(fo[i], obs_row(final_obs, i), f"final_obs[{i}]")
        for k in ("score", "resources_collected", "resources_remaining", "damage_taken", "health"):
            assert info["final_info"][k][i] == final_info[k][i], k
        # the returned observation and info are already the next episode's
        assert_tree_equal(obs_row(obs, i), obs_row(reset_obs, i), f"obs[{i}]")
        assert_info_row(info, i, {k: reset_info[k][i] for k in reset_info if not k.startswith("_")})
        assert obs["time_left"][i, 0] == T
    assert_tree_equal(obs_row(obs, 1), obs_row(final_obs, 1), "obs[1]")
    assert obs["time_left"][1, 0] == 1
    assert same.observation_space.contains(obs)
    for i in (0, 2):
        assert same.single_observation_space.contains(fo[i])


def _sync_pair(B, T, mode):
    native = make_vec(B, max_ticks=T, autoreset_mode=mode)
    sync = gym.vector.SyncVectorEnv([lambda: make_single(max_ticks=T)] * B, autoreset_mode=mode)
    return native, sync


def test_same_step_matches_gymnasium_sync_vector_env():
    B, T, seed = 4, 9, 30
    native, sync = _sync_pair(B, T, AutoresetMode.SAME_STEP)
    obs, _ = native.reset(seed=seed)
    sync.reset(seed=seed)
    rng = np.random.default_rng(3)
    finals = 0
    for step in range(40):
        if step == 3:  # stagger the episodes
            mask = np.array([False, True, False, True])
            obs, _ = native.reset(options={"reset_mask": mask})
            sync.reset(options={"reset_mask": mask})
        action = policy_actions(rng, obs)
        obs, reward, terminated, truncated, info = native.step(action)
        sobs, sreward, sterminated, struncated, sinfo = sync.step(copy_action(action))
        assert_tree_equal(obs, sobs)
        np.testing.assert_array_equal(reward, sreward)
        np.testing.assert_array_equal(terminated, sterminated)
        np.testing.assert_array_equal(truncated, struncated)
        for k in ("score", "resources_collected", "resources_remaining", "damage_taken", "health"):
            np.testing.assert_array_equal(info[k], sinfo[k], err_msg=k)
        assert ("final_obs" in info) == ("final_obs" in sinfo)
        if "final_obs" in sinfo:
            done = sinfo["_final_obs"]
            np.testing.assert_array_equal(info["_final_obs"], done)
            np.testing.assert_array_equal(info["_final_info"], sinfo["_final_info"])
            for i in range(B):
                if done[i]:
                    assert_tree_equal(info["final_obs"][i], sinfo["final_obs"][i], f"final_obs[{i}]")
                    for k in ("score", "resources_collected", "resources_remaining", "damage_taken", "health"):
                        assert info["final_info"][k][i] == sinfo["final_info"][k][i], k
                else:
                    assert info["final_obs"][i] is None
            finals += int(done.sum())
    assert finals >= 2 * B


def test_same_step_final_info_masks_only_the_finished_envs():
    """``final_info`` is a vector info: its ``_key`` masks mark the envs it holds a value for.

    Gymnasium's SyncVectorEnv sets ``final_info["_score"]`` (etc.) only for the envs whose
    episode ended; the values of the other envs are not final infos.
    """
    B, T = 3, 3
    native, sync = _sync_pair(B, T, AutoresetMode.SAME_STEP)
    native.reset(seed=1)
    sync.reset(seed=1)
    mask = np.array([False, True, False])
    idle = full_batch(B)
    native.step(idle)
    sync.step(copy_action(idle))
    native.reset(options={"reset_mask": mask})
    sync.reset(options={"reset_mask": mask})
    native.step(idle)
    sync.step(copy_action(idle))
    _, _, _, _, info = native.step(idle)
    _, _, _, _, sinfo = sync.step(copy_action(idle))
    np.testing.assert_array_equal(sinfo["_final_info"], [True, False, True])
    for k in ("score", "resources_collected", "resources_remaining", "damage_taken", "health"):
        np.testing.assert_array_equal(sinfo["final_info"]["_" + k], [True, False, True])
        np.testing.assert_array_equal(info["final_info"]["_" + k], sinfo["final_info"]["_" + k],
                                      err_msg=f"final_info['_{k}']")


# -- reset_mask -------------------------------------------------------------------------------


def _run(envs, steps, seed=0):
    rng = np.random.default_rng(seed)
    obs = envs.unwrapped.scenario.observe(envs.unwrapped.state)
    for _ in range(steps):
        obs, *_ = envs.step(policy_actions(rng, obs))
    return obs


def test_reset_mask_resets_only_the_masked_envs():
    B, seed = 4, 3
    envs = make_vec(B)
    envs.reset(seed=seed)
    last_obs = _run(envs, 12)
    before = snapshot(envs.unwrapped.state)
    mask = np.array([True, False, True, False])
    obs, info = envs.reset(options={"reset_mask": mask})
    after = snapshot(envs.unwrapped.state)
    assert_snapshot_equal(after, before, rows=~mask, msg="unmasked env")
    for i in (1, 3):
        assert_tree_equal(obs_row(obs, i), obs_row(last_obs, i), f"env {i}")
    for i in (0, 2):
        # no seed: the env's generator goes on, as a single env's does on reset()
        want_obs, want_info = single_reset_obs(seed + i, 1)
        assert_tree_equal(obs_row(obs, i), want_obs, f"env {i}")
        assert_info_row(info, i, want_info, f"env {i}")
        assert after["tick"][i] == 0 and after["episode"][i] == before["episode"][i] + 1


def test_reset_mask_with_a_seed_reseeds_only_the_masked_envs():
    B = 4
    envs = make_vec(B)
    envs.reset(seed=0)
    _run(envs, 5)
    before = snapshot(envs.unwrapped.state)
    mask = np.array([False, True, False, True])
    obs, _ = envs.reset(seed=50, options={"reset_mask": mask})
    assert_snapshot_equal(snapshot(envs.unwrapped.state), before, rows=~mask, msg="unmasked env")
    for i in (1, 3):
        want, _ = make_single().reset(seed=50 + i)
        assert_tree_equal(obs_row(obs, i), want, f"env {i}")


def test_reset_mask_clears_a_pending_next_step_reset():
    B, T = 2, 3
    envs = make_vec(B, max_ticks=T)
    envs.reset(seed=4)
    idle = full_batch(B)
    for _ in range(T):
        _, _, _, truncated, _ = envs.step(idle)
    assert truncated.all()
    envs.reset(options={"reset_mask": np.array([True, False])})
    episode = envs.unwrapped.state.episode.copy()
    obs, reward, terminated, truncated, _ = envs.step(idle)
    # env 0 was already reset by the mask: it is stepped; env 1 is autoreset now
    assert obs["time_left"][:, 0].tolist() == [T - 1, T]
    assert envs.unwrapped.state.episode.tolist() == [episode[0], episode[1] + 1]


BAD_MASKS = {
    "too long": np.ones(5, bool),
    "too short": np.ones(3, bool),
    "2-D": np.ones((4, 1), bool),
    "ints": np.array([1, 0, 1, 0]),
    "floats": np.array([1.0, 0.0, 0.0, 0.0]),
    "int list": [1, 0, 1, 0],
    "nothing selected": np.zeros(4, bool),
    "scalar": np.bool_(True),
}


@pytest.mark.parametrize("name", list(BAD_MASKS))
def test_invalid_reset_masks_raise_and_change_nothing(name):
    envs = make_vec(4)
    envs.reset(seed=9)
    _run(envs, 3)
    before = snapshot(envs.unwrapped.state)
    with pytest.raises(ValueError, match="reset_mask"):
        envs.reset(options={"reset_mask": BAD_MASKS[name]})
    assert_snapshot_equal(snapshot(envs.unwrapped.state), before)


def test_single_env_reset_and_vector_reset_agree_on_first_observation():
    envs = make_vec(3, layout="random")
    obs, info = envs.reset(seed=77)
    for i in range(3):
        want, want_info = make_single().reset(seed=77 + i)
        assert_tree_equal(obs_row(obs, i), want, f"env {i}")
        assert_info_row(info, i, want_info)
        assert envs.single_observation_space.contains(obs_row(obs, i))
    assert all(v.all() for k, v in info.items() if k.startswith("_"))


def test_returned_arrays_do_not_alias_the_state():
    """Writing into a returned observation or info must not change the worlds."""
    for mode in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
        envs = make_vec(3, max_ticks=2, autoreset_mode=mode)
        outputs = [envs.reset(seed=0)]
        for _ in range(3):
            outputs.append(envs.step(full_batch(3, TOOLS["query_world"])))
        state = dict(envs.unwrapped.state.arrays())
        for out in outputs:
            arrays = [v for v in out[0].values()] + [v for v in out[-1].values() if isinstance(v, np.ndarray)]
            for arr in arrays:
                for name, s in state.items():
                    assert not np.shares_memory(arr, s), name
