"""Sb3VecEnv against Stable-Baselines3's VecEnv contract, and the flat single envs under SB3's check_env."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from conftest import ENV_ID, make_single, make_vec
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor, VecNormalize

from arena_envs import team_capture_v0
from arena_envs.wrappers import FlatEnv, FlatVectorEnv, Sb3VecEnv
from arena_envs.wrappers.flatten import merge_agents, split_agents

# An encoding that lets random actions finish episodes: walk to and collect the one resource.
EPISODIC = dict(tools=("move_to", "collect", "query_world"), targets=1)
SHORT = dict(num_resources=1, max_ticks=30)


@pytest.mark.filterwarnings("ignore:.*different from the unwrapped version")  # checking the wrapper is the point
@pytest.mark.parametrize("encoding", [{}, {"dict_obs": True}, EPISODIC, {"targets_by_kind": True}])
@pytest.mark.parametrize("env_id", [ENV_ID, "arena_envs/Crafting-v0"])
@pytest.mark.parametrize("layout", ["random", "classic"])
def test_flat_single_envs_pass_sb3_and_gymnasium_check_env(env_id, layout, encoding):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any complaint of SB3's checker fails the test
        check_env(FlatEnv(gym.make(env_id, layout=layout), **encoding))
    gym_check_env(FlatEnv(gym.make(env_id, layout=layout), **encoding), skip_render_check=True)


def random_flat_actions(venv, steps: int, seed: int = 0) -> list[np.ndarray]:
    space = venv.action_space
    space.seed(seed)
    return [np.stack([space.sample() for _ in range(venv.num_envs)]) for _ in range(steps)]


def test_adapter_matches_a_dummy_vec_env_of_single_envs_step_for_step():
    """Same seeds, same actions: same observations, rewards, dones, terminal observations and
    truncation flags as SB3's own DummyVecEnv over single envs (the reference semantics)."""
    B = 8
    native = Sb3VecEnv.make(ENV_ID, B, flat=EPISODIC, **SHORT)
    dummy = DummyVecEnv([lambda: FlatEnv(make_single(**SHORT), **EPISODIC) for _ in range(B)])
    native.seed(11)
    dummy.seed(11)
    np.testing.assert_array_equal(native.reset(), dummy.reset())
    terminated = truncated = 0
    for actions in random_flat_actions(native, 120, seed=3):
        obs, reward, done, infos = native.step(actions)
        want_obs, want_reward, want_done, want_infos = dummy.step(actions)
        np.testing.assert_array_equal(obs, want_obs)
        np.testing.assert_array_equal(reward, want_reward)
        np.testing.assert_array_equal(done, want_done)
        assert reward.dtype == np.float32 and done.dtype == np.bool_ and len(infos) == B
        for i in np.flatnonzero(done):
            np.testing.assert_array_equal(infos[i]["terminal_observation"], want_infos[i]["terminal_observation"])
            assert infos[i]["TimeLimit.truncated"] == want_infos[i]["TimeLimit.truncated"]
            assert infos[i]["score"] == want_infos[i]["score"]
            truncated += infos[i]["TimeLimit.truncated"]
            terminated += not infos[i]["TimeLimit.truncated"]
    assert terminated > 0 and truncated > 0  # both ways of ending were exercised


def test_terminal_observation_is_the_last_one_and_the_new_episode_starts_at_once():
    B, T = 4, 12
    venv = Sb3VecEnv.make(ENV_ID, B, max_ticks=T)
    obs = venv.reset()
    assert obs.shape == (B, *venv.observation_space.shape) and obs.dtype == np.float32
    idle = np.zeros((B, len(venv.action_space.nvec)), np.int64)
    idle[:, 0] = list(venv.get_attr("encoding")[0].tools).index("idle")
    for t in range(1, T + 1):
        previous = obs
        obs, reward, done, infos = venv.step(idle)
        if t < T:
            assert not done.any() and all(info == {} for info in infos)
    assert done.all()
    for i in range(B):
        last = infos[i]["terminal_observation"]
        assert last[-1] == 0.0 and obs[i, -1] == 1.0  # time_left (the last column): over, and fresh
        # an idle agent in an unchanging world: the last observation is the previous one, one tick on
        np.testing.assert_array_equal(last[:-1], previous[i, :-1])
        assert infos[i]["TimeLimit.truncated"] is True


def test_seed_makes_resets_reproducible_and_is_used_once():
    def rollout(venv, seed):
        venv.seed(seed)
        frames = [venv.reset()]
        for actions in random_flat_actions(venv, 40, seed=0):
            frames.append(venv.step(actions)[0])
        return np.stack(frames)

    venv = Sb3VecEnv.make(ENV_ID, 4, max_ticks=15)
    first = rollout(venv, 5)
    np.testing.assert_array_equal(rollout(venv, 5), first)
    assert not np.array_equal(rollout(venv, 6), first)
    venv.seed(5)
    venv.reset()
    assert not np.array_equal(venv.reset(), first[0])  # the seed served one reset only
    # world i seeded s + i, as a single env seeded s + i
    single = FlatEnv(make_single(max_ticks=15))
    np.testing.assert_array_equal(single.reset(seed=5 + 2)[0], first[0, 2])


def test_vec_monitor_and_vec_normalize_run_over_the_adapter():
    T = 10
    venv = VecNormalize(VecMonitor(Sb3VecEnv.make(ENV_ID, 3, max_ticks=T)), gamma=0.99)
    obs = venv.reset()
    episodes = []
    for actions in random_flat_actions(venv, 2 * T, seed=1):
        obs, reward, done, infos = venv.step(actions)
        assert np.isfinite(obs).all() and np.isfinite(reward).all()
        episodes += [info["episode"] for info in infos if "episode" in info]
    assert len(episodes) == 6 and all(e["l"] == T for e in episodes)
    assert venv.obs_rms.count > 2 * T  # statistics were gathered

    as_dict = VecNormalize(Sb3VecEnv.make(ENV_ID, 2, flat={"dict_obs": True}, max_ticks=T))
    obs = as_dict.reset()
    assert set(obs) == set(as_dict.observation_space.spaces) and obs["resources"].shape[0] == 2


def test_attributes_and_methods_reach_the_batch():
    B = 3
    venv = Sb3VecEnv.make(ENV_ID, B, render_mode="rgb_array")
    venv.reset()
    assert venv.get_attr("render_mode") == ["rgb_array"] * B
    assert venv.get_attr("num_envs", indices=[0, 2]) == [B, B]
    assert venv.get_attr("encoding", indices=1)[0].components[0] == "tool"  # the FlatVectorEnv layer
    venv.set_attr("render_worlds", 2)  # owned by the native layer underneath
    assert venv.get_attr("render_worlds") == [2] * B and venv.envs.unwrapped.render_worlds == 2
    with pytest.raises(ValueError, match="every index"):
        venv.set_attr("render_worlds", 1, indices=[0])
    with pytest.raises(AttributeError):
        venv.get_attr("no_such_attribute")
    (frame,) = venv.env_method("render", indices=[0])
    assert frame.ndim == 3 and frame.dtype == np.uint8
    assert venv.env_is_wrapped(FlatVectorEnv) == [True] * B
    assert venv.env_is_wrapped(Monitor, indices=[1]) == [False]
    assert venv.has_attr("scenario") and not venv.has_attr("no_such_attribute")
    images = venv.get_images()
    assert len(images) == B and images[0].ndim == 3 and images[0].dtype == np.uint8


def test_reset_options_and_reset_infos():
    B = 4
    venv = Sb3VecEnv.make(ENV_ID, B)
    venv.reset()
    assert len(venv.reset_infos) == B and venv.reset_infos[2]["resources_remaining"] > 0
    for actions in random_flat_actions(venv, 5, seed=2):
        obs, *_ = venv.step(actions)
    assert (obs[:, -1] < 1).all()
    mask = np.array([False, True, False, False])
    venv.set_options({"reset_mask": mask})
    obs = venv.reset()
    np.testing.assert_array_equal(obs[:, -1] == 1.0, mask)  # only world 1 started over
    venv.set_options([{"reset_mask": mask}, {}, {}, {}])
    with pytest.raises(ValueError, match="one set of reset options"):
        venv.reset()


def test_raw_dict_observations_and_actions_pass_through_unflattened():
    venv = Sb3VecEnv.make(ENV_ID, 2, flat=False, max_ticks=3)
    obs = venv.reset()
    assert isinstance(obs, dict) and obs["resources"].shape[0] == 2
    space = venv.action_space
    space.seed(0)
    for _ in range(3):
        actions = gym.vector.utils.batch_space(space, 2).sample()
        obs, reward, done, infos = venv.step(actions)
    assert done.all() and set(infos[0]["terminal_observation"]) == set(obs)


def test_the_adapter_needs_same_step_autoreset():
    with pytest.raises(ValueError, match="SAME_STEP"):
        Sb3VecEnv(make_vec(2))


def test_team_capture_gives_every_agent_of_every_world_a_slot():
    B, A, T = 3, 4, 12
    encoding = {"tools": ("move_to", "send_message", "idle")}
    venv = Sb3VecEnv.make("team_capture_v0", B, flat=encoding, max_cycles=T)
    raw = team_capture_v0.vector_env(num_envs=B, autoreset_mode="SameStep", max_cycles=T)
    enc = venv.get_attr("encoding")[0]
    assert venv.num_envs == B * A and venv.observation_space == enc.observation_space
    venv.seed(2)
    obs = venv.reset()
    raw_obs, _ = raw.reset(seed=[2, 2 + A, 2 + 2 * A])  # a world takes its first slot's seed
    for t, actions in enumerate(random_flat_actions(venv, T), 1):
        np.testing.assert_array_equal(obs, enc.observe(merge_agents(raw_obs, A)))  # slot b * A + a
        structured = split_agents(enc.decode(actions, merge_agents(raw_obs, A)), A)
        raw_obs, raw_reward, _, raw_truncated, raw_info = raw.step(structured)
        obs, reward, done, infos = venv.step(actions)
        np.testing.assert_array_equal(reward, raw_reward.ravel().astype(np.float32))
        assert done.all() == (t == T) and raw_truncated.all() == (t == T)
    for i in range(B * A):
        b, a = divmod(i, A)
        assert infos[i]["TimeLimit.truncated"] is True
        assert infos[i]["blue_score"] == raw_info["final_info"]["blue_score"][b]
        final = {k: v[None] for k, v in raw_info["final_obs"][b].items()}  # world b's last raw observation
        np.testing.assert_array_equal(infos[i]["terminal_observation"], enc.observe(merge_agents(final, A))[a])
    np.testing.assert_array_equal(obs, enc.observe(merge_agents(raw_obs, A)))  # and the new episodes' first
