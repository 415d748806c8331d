"""RLlib PPO on a local Ray instance (2 EnvRunners): the episodes and returns it reports are the envs' own."""

from __future__ import annotations

import numpy as np
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.rllib")

from arena_envs.names import UnknownNameError  # noqa: E402
from arena_envs.training.rllib_ppo import build_config, env_episodes, env_id, summary  # noqa: E402
from arena_envs.wrappers.rllib import TeamCaptureMultiAgentEnv, make_vector_env, register  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=3, include_dashboard=False, object_store_memory=100 * 2**20, log_to_driver=False)
    register()
    yield
    ray.shutdown()


def train(config, iterations: int):
    """Each iteration's summary and the episodes the envs themselves saw end in it."""
    algo = config.build_algo()
    try:
        rows, ended, seen = [], [], [0] * config.num_env_runners
        for _ in range(iterations):
            rows.append(summary(algo.train()))
            per_runner = env_episodes(algo)
            ended.append([e for runner, n in zip(per_runner, seen, strict=True) for e in runner[n:]])
            seen = [len(runner) for runner in per_runner]
        return rows, ended
    finally:
        algo.stop()


def test_foraging_episodes_and_returns_match_the_envs(local_ray):
    # 20-tick episodes, 8 worlds per runner, 2 runners: a few dozen episodes in three iterations
    config = build_config("arena_envs/Foraging-v0", env_runners=2, envs_per_runner=8, env_config={"max_ticks": 20},
                          train_batch_size=320, minibatch_size=160, epochs=2)
    rows, ended = train(config, 3)
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert rows[-1]["env_steps"] >= 3 * 320
    assert rows[-1]["episodes_lifetime"] == sum(len(episodes) for episodes in ended)
    for row, episodes in zip(rows, ended, strict=True):  # what RLlib reports for an iteration, the envs saw
        assert row["episodes"] == len(episodes) > 0
        assert all(e["length"] == 20 for e in episodes)
        assert row["episode_len_mean"] == pytest.approx(20)
        assert row["episode_return_mean"] == pytest.approx(np.mean([e["return"] for e in episodes]), abs=1e-6)


def test_team_capture_per_agent_returns_match_the_envs(local_ray):
    config = build_config("arena_envs/TeamCapture-v0", env_runners=2, envs_per_runner=2, separate_policies=True,
                          env_config={"agents_per_team": 1, "max_cycles": 15}, train_batch_size=120,
                          minibatch_size=60, epochs=2)
    rows, ended = train(config, 3)
    for row, episodes in zip(rows, ended, strict=True):
        assert row["episodes"] == len(episodes) > 0
        assert set(row["agent_returns"]) == {"blue_agent_1", "red_agent_1"}
        for agent, reported in row["agent_returns"].items():
            assert reported == pytest.approx(np.mean([e["returns"][agent] for e in episodes]), abs=1e-6)


def test_vector_env_is_one_native_batch_in_next_step_mode():
    register()
    envs = make_vector_env("arena_envs/Crafting-v0", {"num_envs": 5, "max_ticks": 4})
    assert envs.num_envs == 5 and envs.metadata["autoreset_mode"].value == "NextStep"
    obs, _ = envs.reset(seed=0)
    assert obs.shape[0] == 5 and obs.dtype == np.float32
    for _ in range(9):  # two whole episodes: 4 ticks, then the reset step, then 4 more
        envs.step(envs.action_space.sample())
    assert len(envs.episodes) == 10 and all(e["length"] == 4 for e in envs.episodes)


def test_team_capture_env_checks_its_input():
    env = TeamCaptureMultiAgentEnv({"agents_per_team": 2, "max_cycles": 5})
    obs, infos = env.reset(seed=1)
    assert set(obs) == set(env.possible_agents) == set(infos) and len(obs) == 4
    with pytest.raises(ValueError, match="no action for"):
        env.step({"blue_agent_1": env.action_spaces["blue_agent_1"].sample()})
    actions = {a: env.action_spaces[a].sample() for a in env.possible_agents}
    for _ in range(5):
        obs, rewards, ends, cuts, infos = env.step(actions)
    assert cuts["__all__"] and not ends["__all__"] and env.agents == []
    assert len(env.episodes) == 1 and env.episodes[0]["length"] == 5
    # the team rewards are zero-sum, and so are the recorded returns
    assert sum(env.episodes[0]["returns"].values()) == pytest.approx(0, abs=1e-6)


def test_env_names():
    assert env_id("Foraging-v0") == "arena_envs/Foraging-v0"
    assert env_id("team_capture_v0") == "arena_envs/TeamCapture-v0"
    with pytest.raises(UnknownNameError, match="unknown environment .CartPole-v1."):
        env_id("CartPole-v1")
