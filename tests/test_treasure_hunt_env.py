"""TreasureHunt-v0 as a Gymnasium environment, its batched form, and the oracle agent."""

from __future__ import annotations

import json
import os
import posixpath
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.vector import AutoresetMode

import arena_envs  # noqa: F401  (registers the environments)
from arena_envs.treasure_hunt import (
    PRESETS,
    OracleAgent,
    TreasureHuntEnv,
    TreasureHuntVectorEnv,
    generate_treasure_hunt,
)
from arena_envs.treasure_hunt.env import INFO_KEYS, WELCOME

ENV_ID = "arena_envs/TreasureHunt-v0"


def body_of(observation: str) -> str:
    return observation.rpartition("\n[turn ")[0]


def play(env: gym.Env, agent: OracleAgent, observation: str) -> tuple[list[float], dict[str, Any], bool, bool]:
    rewards = []
    while True:
        observation, reward, terminated, truncated, info = env.step(agent.act(observation))
        rewards.append(reward)
        if terminated or truncated:
            return rewards, info, terminated, truncated


def treasure_dir(env: TreasureHuntEnv) -> str:
    return "/" + posixpath.dirname(env.hunt.config["treasure_path"])


# --- Gymnasium API ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"backend": "disk"}, {"render_mode": "ansi", "difficulty": "hard"}],
    ids=["memory", "disk", "ansi-hard"],
)
def test_check_env_passes_without_warnings(kwargs: dict[str, Any]) -> None:
    env = gym.make(ENV_ID, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped)
    env.close()


def test_gym_make_builds_the_environment_with_its_arguments() -> None:
    env = gym.make(ENV_ID, difficulty="medium", max_steps=20, depth=3)
    unwrapped = env.unwrapped
    assert isinstance(unwrapped, TreasureHuntEnv)
    env.reset(seed=4)
    config = unwrapped.hunt.config
    assert (config["depth"], config["branching_factor"], config["file_density"]) == (3, 3, 0.3)
    assert unwrapped.max_steps == 20


@pytest.mark.parametrize(
    "kwargs",
    [
        {"difficulty": "impossible"},
        {"backend": "cloud"},
        {"max_steps": 0},
        {"render_mode": "human"},
        {"depth": 0},
        {"file_density": -1.0},
    ],
)
def test_invalid_arguments_raise_value_error(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        TreasureHuntEnv(**kwargs)
    with pytest.raises(ValueError):
        TreasureHuntVectorEnv(num_envs=2, **kwargs)


def test_reset_plays_the_hunt_of_the_seed() -> None:
    env = TreasureHuntEnv(difficulty="medium")
    observation, info = env.reset(seed=77)
    assert env.hunt.config == generate_treasure_hunt(seed=77, difficulty="medium").config
    assert observation == f"{WELCOME}\n[turn 0/50 | cwd / | in progress]"
    assert info == {
        "turns": 0,
        "optimal_path_length": 9,
        "efficiency": 0.0,
        "wrong_keys_tried": 0,
        "red_herrings_entered": 0,
        "success": False,
    }
    env.reset()
    first_unseeded = env.hunt.config["treasure_key"]
    env.reset(seed=77)
    env.reset()
    assert env.hunt.config["treasure_key"] == first_unseeded


def test_observation_shows_output_turn_and_status() -> None:
    env = TreasureHuntEnv()
    env.reset(seed=3)
    observation, reward, terminated, truncated, info = env.step('{"tool": "cat", "file": "start.txt"}')
    assert observation == f"{env.hunt.layout.files['start.txt']}\n[turn 1/50 | cwd / | in progress]"
    assert (reward, terminated, truncated, info["turns"]) == (-0.01, False, False, 1)
    observation, *_ = env.step({"tool": "cat", "file": "nope.txt"})
    assert observation == "Error: File not found: nope.txt\n[turn 2/50 | cwd / | in progress]"
    first = env.hunt.config["golden_path"][0]
    observation, *_ = env.step({"tool": "cd", "path": first})
    assert observation == f"Changed to /{first}\n[turn 3/50 | cwd /{first} | in progress]"
    assert env.cwd == first


@pytest.mark.parametrize(
    "action",
    [
        {"tool": "pwd"},
        '{"tool": "pwd"}',
        {"name": "pwd", "arguments": {}},
        {"name": "pwd", "arguments": "{}"},
        {"type": "function", "function": {"name": "pwd", "arguments": "{}"}},
        '```json\n{"tool": "pwd"}\n```',
    ],
)
def test_actions_in_every_tool_call_form(action: Any) -> None:
    env = TreasureHuntEnv()
    env.reset(seed=0)
    observation, *_ = env.step(action)
    assert body_of(observation) == "/"


@pytest.mark.parametrize(
    "action",
    [
        None,
        42,
        3.5,
        [],
        ["ls"],
        {"tool": None},
        b"\xff",
        "\x00",
        "",
        "{" * 5000,
        "x" * 100_000,
        {"tool": "ls", "path": 7},
    ],
)
def test_bad_actions_cost_a_turn_and_never_raise(action: Any) -> None:
    env = TreasureHuntEnv()
    env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step(action)
    assert observation.startswith("Error: ")
    assert observation in env.observation_space
    assert (reward, terminated, truncated, info["turns"]) == (-0.01, False, False, 1)


def test_random_text_actions_give_error_observations() -> None:
    env = TreasureHuntEnv()
    env.reset(seed=0)
    env.action_space.seed(0)
    for _ in range(30):
        observation, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        assert observation.startswith("Error: Invalid tool call") and observation in env.observation_space
        assert not terminated


def test_success_rewards_one_and_terminates() -> None:
    env = TreasureHuntEnv()
    env.reset(seed=5)
    key = env.hunt.config["treasure_key"]
    env.step({"tool": "cd", "path": treasure_dir(env)})
    observation, reward, terminated, truncated, info = env.step({"tool": "check_treasure", "key": key})
    assert body_of(observation) == "TREASURE FOUND! You win!"
    assert observation.endswith("| treasure found]")
    assert reward == pytest.approx(0.99)
    assert terminated and not truncated
    assert info["success"] and info["turns"] == 2
    assert info["efficiency"] == 1.0  # capped: guessing the way beats the optimal path


def test_wrong_keys_and_red_herrings_are_counted() -> None:
    env = TreasureHuntEnv()
    env.reset(seed=8)
    herring = env.hunt.config["red_herrings"][0]
    env.step({"tool": "cd", "path": f"/{herring}"})
    env.step({"tool": "cd", "path": "/"})
    env.step({"tool": "cd", "path": f"/{herring}"})
    env.step({"tool": "cd", "path": "/ghost"})
    env.step({"tool": "check_treasure", "key": env.hunt.config["treasure_key"]})
    env.step({"tool": "cd", "path": treasure_dir(env)})
    _, reward, terminated, _, info = env.step({"tool": "check_treasure", "key": "0123456789abcdef"})
    assert (reward, terminated) == (-0.01, False)
    assert info["wrong_keys_tried"] == 2
    assert info["red_herrings_entered"] == 2
    assert not info["success"] and info["efficiency"] == 0.0


def test_give_up_terminates_without_success() -> None:
    env = TreasureHuntEnv()
    env.reset(seed=1)
    observation, reward, terminated, truncated, info = env.step({"tool": "give_up"})
    assert observation.endswith("| gave up]")
    assert (reward, terminated, truncated, info["success"]) == (-0.01, True, False, False)


def test_truncation_after_max_steps() -> None:
    env = gym.make(ENV_ID)
    env.reset(seed=2)
    for turn in range(1, 51):
        observation, reward, terminated, truncated, info = env.step({"tool": "pwd"})
        assert reward == -0.01 and not terminated
        assert truncated == (turn == 50)
    assert observation.endswith("[turn 50/50 | cwd / | out of turns]")
    assert info["turns"] == 50


def test_stepping_a_finished_episode_changes_nothing() -> None:
    env = TreasureHuntEnv()
    env.reset(seed=1)
    env.step({"tool": "give_up"})
    observation, reward, terminated, truncated, info = env.step({"tool": "pwd"})
    assert body_of(observation).startswith("Error: the hunt is over")
    assert (reward, terminated, truncated, info["turns"]) == (0.0, True, False, 1)


def test_step_before_reset_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="reset"):
        TreasureHuntEnv().step({"tool": "pwd"})


def test_hostile_paths_are_refused_in_the_environment() -> None:
    env = TreasureHuntEnv(backend="disk")
    env.reset(seed=1)
    for path in ("../..", "/..", "../" * 40 + "etc/passwd", "a\x00b", "x" * 3000, "\u202e.."):
        observation, *_ = env.step({"tool": "cat", "file": path})
        assert body_of(observation) == "Error: Path outside treasure hunt boundaries"
    observation, *_ = env.step({"tool": "cat", "file": ".treasure_hunt_config.json"})
    assert body_of(observation) == "Error: File not found: .treasure_hunt_config.json"
    env.close()


def test_disk_text_is_made_to_fit_the_observation_space() -> None:
    env = TreasureHuntEnv(backend="disk")
    env.reset(seed=1)
    (Path(env.hunt.root) / "start.txt").write_text("caf\u00e9\tnote\r\n" + "z" * 8000, encoding="utf-8")
    observation, *_ = env.step({"tool": "cat", "file": "start.txt"})
    assert observation in env.observation_space
    assert body_of(observation).startswith("caf??note?\nzzz")
    (Path(env.hunt.root) / "empty.txt").write_text("")
    observation, *_ = env.step({"tool": "cat", "file": "empty.txt"})
    assert body_of(observation) == "(empty)"
    env.close()


def test_disk_backend_cleans_up_its_directories() -> None:
    env = TreasureHuntEnv(backend="disk")
    env.reset(seed=1)
    first = Path(env.hunt.root)
    assert (first / "start.txt").is_file()
    env.reset(seed=2)
    second = Path(env.hunt.root)
    assert not first.exists() and second.exists()
    env.close()
    assert not second.exists()


def test_render_ansi_shows_the_explored_tree() -> None:
    env = gym.make(ENV_ID, render_mode="ansi")
    env.reset(seed=6)
    hunt = env.unwrapped.hunt
    first = hunt.config["golden_path"][0]
    assert env.render() == "/  <- you are here\n[turn 0/50 | in progress]"
    env.step({"tool": "cat", "file": "start.txt"})
    env.step({"tool": "ls"})
    env.step({"tool": "cd", "path": first})
    picture = env.render()
    assert "start.txt (read)" in picture
    assert f"{first}/  <- you are here" in picture
    for herring in hunt.layout.directories[""][1]:
        assert f"{herring}/" in picture
    assert picture.endswith("[turn 3/50 | in progress]")
    assert gym.make(ENV_ID).unwrapped.render() is None


def test_decisions_drive_the_environment() -> None:
    from arena_envs.tools import Decision

    env = TreasureHuntEnv()
    env.reset(seed=0)
    observation, *_ = env.step(Decision("cat", {"file": "start.txt"}, "read the first clue"))
    assert body_of(observation) == env.hunt.layout.files["start.txt"]


def test_tool_schemas_drive_the_environment() -> None:
    from arena_envs.treasure_hunt import TREASURE_HUNT_TOOL_SCHEMAS

    env = TreasureHuntEnv()
    env.reset(seed=0)
    names = {schema["function"]["name"] for schema in TREASURE_HUNT_TOOL_SCHEMAS}
    assert names == {"pwd", "cd", "ls", "cat", "check_treasure", "give_up"}
    observation, *_ = env.step({"type": "function", "function": {"name": "ls", "arguments": "{}"}})
    assert "start.txt" in body_of(observation).split("\n")


# --- the oracle -------------------------------------------------------------------------


@pytest.mark.parametrize("difficulty", sorted(PRESETS))
def test_oracle_solves_every_hunt_within_the_step_limit(difficulty: str) -> None:
    env = TreasureHuntEnv(difficulty=difficulty)
    agent = OracleAgent()
    solved = 0
    for seed in range(300):
        observation, info = env.reset(seed=seed)
        rewards, info, terminated, _ = play(env, agent, observation)
        assert terminated and info["success"], f"seed {seed} not solved"
        assert info["turns"] == info["optimal_path_length"] <= env.max_steps
        assert info["efficiency"] == 1.0 and info["red_herrings_entered"] == 0
        assert sum(rewards) == pytest.approx(1.0 - 0.01 * info["turns"])
        solved += 1
    assert solved == 300


def test_oracle_solves_disk_hunts() -> None:
    env = gym.make(ENV_ID, backend="disk", difficulty="hard")
    agent = OracleAgent()
    for seed in range(5):
        rewards, info, terminated, _ = play(env, agent, env.reset(seed=seed)[0])
        assert terminated and info["success"]
    env.close()


def test_oracle_gives_up_when_a_clue_names_no_path() -> None:
    env = TreasureHuntEnv(backend="disk")
    observation, _ = env.reset(seed=0)
    (Path(env.hunt.root) / "start.txt").write_text("Nothing to see.")
    agent = OracleAgent()
    observation, *_ = env.step(agent.act(observation))
    assert body_of(observation) == "Nothing to see."
    assert agent.act(observation) == {"tool": "give_up"}
    env.close()


# --- determinism ------------------------------------------------------------------------

TRAJECTORY_SCRIPT = """
import json, gymnasium as gym, arena_envs
from arena_envs.treasure_hunt import OracleAgent
records = []
for difficulty in ("easy", "hard"):
    env = gym.make("arena_envs/TreasureHunt-v0", difficulty=difficulty)
    observation, _ = env.reset(seed=123)
    agent = OracleAgent()
    for _ in range(30):
        records.append(observation)
        observation, reward, terminated, truncated, info = env.step(agent.act(observation))
        records.append([reward, terminated, truncated, info])
        if terminated or truncated:
            observation, _ = env.reset()
print(json.dumps(records))
"""


def test_trajectories_are_identical_across_processes() -> None:
    namespace: dict[str, Any] = {}
    exec(TRAJECTORY_SCRIPT.replace("print(json.dumps(records))", ""), namespace)
    expected = json.loads(json.dumps(namespace["records"]))
    output = subprocess.run(
        [sys.executable, "-c", TRAJECTORY_SCRIPT],
        env={**os.environ, "PYTHONHASHSEED": "99"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(output) == expected


# --- the batched environment ------------------------------------------------------------


def test_make_vec_builds_the_native_vector_env() -> None:
    envs = gym.make_vec(ENV_ID, num_envs=3, difficulty="medium")
    assert isinstance(envs.unwrapped, TreasureHuntVectorEnv)
    assert envs.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    observations, infos = envs.reset(seed=0)
    assert isinstance(observations, tuple) and len(observations) == 3
    assert observations in envs.observation_space
    assert envs.unwrapped.hunts[2].config == generate_treasure_hunt(seed=2, difficulty="medium").config
    for key in INFO_KEYS:
        assert infos[key].shape == (3,) and infos[f"_{key}"].all()
    envs.close()


def run_single(seed: int, actions: list[Any]) -> list[tuple[str, float, bool, bool, dict[str, Any]]]:
    """A single env driven with NEXT_STEP autoreset semantics, as a sub-env of a batch is."""
    env = TreasureHuntEnv()
    env.reset(seed=seed)
    done = False
    steps = []
    for action in actions:
        if done:
            observation, info = env.reset()
            steps.append((observation, 0.0, False, False, info))
            done = False
        else:
            observation, reward, terminated, truncated, info = env.step(action)
            steps.append((observation, reward, terminated, truncated, info))
            done = terminated or truncated
    return steps


def test_batched_env_matches_single_envs_seeded_s_plus_i() -> None:
    num_envs, seed = 4, 40
    envs = TreasureHuntVectorEnv(num_envs=num_envs)
    observations, _ = envs.reset(seed=seed)
    agents = [OracleAgent() for _ in range(num_envs)]
    actions_taken: list[list[Any]] = [[] for _ in range(num_envs)]
    batched: list[list[tuple[str, float, bool, bool, dict[str, Any]]]] = [[] for _ in range(num_envs)]
    for step in range(40):
        actions = [agent.act(observation) for agent, observation in zip(agents, observations, strict=True)]
        if step % 5 == 4:
            actions[1] = {"tool": "give_up"}  # make episodes end at different times
        observations, rewards, terminations, truncations, infos = envs.step(actions)
        for index in range(num_envs):
            actions_taken[index].append(actions[index])
            info = {key: infos[key][index].item() for key in INFO_KEYS}  # the single env's: Python scalars
            batched[index].append((observations[index], rewards[index], terminations[index], truncations[index], info))
    for index in range(num_envs):
        single = run_single(seed + index, actions_taken[index])
        assert batched[index] == single
        for *_, info in single:
            assert [type(info[key]) for key in INFO_KEYS] == [int, int, float, int, int, bool]
    assert sum(step[2] for steps in batched for step in steps) >= 2 * num_envs
    assert {info["success"] for steps in batched for *_, info in steps} == {True, False}


def test_next_step_autoreset_ignores_the_action_and_returns_the_first_observation() -> None:
    envs = TreasureHuntVectorEnv(num_envs=2)
    envs.reset(seed=0)
    _, rewards, terminations, _, _ = envs.step([{"tool": "give_up"}, {"tool": "pwd"}])
    assert terminations.tolist() == [True, False]
    old_key = envs.hunts[0].config["treasure_key"]
    observations, rewards, terminations, truncations, infos = envs.step([{"tool": "give_up"}, {"tool": "pwd"}])
    assert observations[0] == f"{WELCOME}\n[turn 0/50 | cwd / | in progress]"
    assert (rewards[0], terminations[0], truncations[0], infos["turns"][0]) == (0.0, False, False, 0)
    assert envs.hunts[0].config["treasure_key"] != old_key
    assert infos["turns"][1] == 2


def test_same_step_autoreset_reports_final_observation_and_info() -> None:
    envs = gym.make_vec(ENV_ID, num_envs=3, autoreset_mode=AutoresetMode.SAME_STEP)
    assert envs.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    envs.reset(seed=0)
    envs.step([{"tool": "pwd"}] * 3)
    observations, rewards, terminations, _, infos = envs.step([{"tool": "pwd"}, {"tool": "give_up"}, {"tool": "pwd"}])
    assert terminations.tolist() == [False, True, False]
    assert rewards[1] == -0.01
    assert observations[1] == f"{WELCOME}\n[turn 0/50 | cwd / | in progress]"
    assert infos["_final_obs"].tolist() == [False, True, False]
    assert infos["final_obs"][1].endswith("[turn 2/50 | cwd / | gave up]")
    assert infos["final_info"]["turns"][1] == 2 and infos["final_info"]["_turns"].tolist() == [False, True, False]
    assert infos["turns"].tolist() == [2, 0, 2]
    observations, rewards, *_ = envs.step([{"tool": "pwd"}] * 3)
    assert observations[1].endswith("[turn 1/50 | cwd / | in progress]") and rewards[1] == -0.01


def test_reset_mask_resets_only_the_chosen_envs() -> None:
    envs = TreasureHuntVectorEnv(num_envs=3)
    envs.reset(seed=10)
    envs.step([{"tool": "pwd"}] * 3)
    keys = [hunt.config["treasure_key"] for hunt in envs.hunts]
    observations, infos = envs.reset(seed=[None, 500, None], options={"reset_mask": np.array([False, True, False])})
    assert [hunt.config["treasure_key"] for hunt in envs.hunts][::2] == keys[::2]
    assert envs.hunts[1].config == generate_treasure_hunt(seed=500).config
    assert observations[1].endswith("[turn 0/50 | cwd / | in progress]")
    assert observations[0].endswith("[turn 1/50 | cwd / | in progress]")
    assert infos["_turns"].tolist() == [False, True, False]
    envs.reset(seed=np.int64(20), options={"reset_mask": np.array([True, False, False])})
    assert envs.hunts[0].config == generate_treasure_hunt(seed=20).config
    for bad_mask in (np.array([True, False]), np.array([1, 0, 1]), np.zeros(3, bool)):
        with pytest.raises(ValueError, match="reset_mask"):
            envs.reset(options={"reset_mask": bad_mask})


@pytest.mark.parametrize("actions", ['{"tool": "pwd"}', [{"tool": "pwd"}] * 2, {"tool": "pwd"}])
def test_a_malformed_batch_is_a_clear_value_error(actions: Any) -> None:
    envs = TreasureHuntVectorEnv(num_envs=3)
    envs.reset(seed=0)
    with pytest.raises(ValueError, match="3 tool calls"):
        envs.step(actions)


def test_bad_actions_in_a_batch_affect_only_their_env() -> None:
    envs = TreasureHuntVectorEnv(num_envs=3)
    envs.reset(seed=0)
    observations, rewards, terminations, _, _ = envs.step([None, {"tool": "pwd"}, "}{"])
    assert observations[0].startswith("Error: ") and observations[2].startswith("Error: ")
    assert body_of(observations[1]) == "/"
    assert rewards.tolist() == [-0.01] * 3 and not terminations.any()


def test_vector_env_on_disk_renders_and_cleans_up() -> None:
    envs = TreasureHuntVectorEnv(num_envs=2, backend="disk", render_mode="ansi")
    envs.reset(seed=0)
    roots = [Path(hunt.root) for hunt in envs.hunts]
    assert all(root.is_dir() for root in roots)
    envs.step([{"tool": "ls"}, {"tool": "pwd"}])
    pictures = envs.render()
    assert len(pictures) == 2 and "start.txt" in pictures[0] and "start.txt" not in pictures[1]
    envs.close()
    assert not any(root.exists() for root in roots)


def test_bench_rows_report_tool_call_rates() -> None:
    from arena_envs.treasure_hunt.bench import bench_rows

    rows = bench_rows(seconds=0.05)
    assert [label.split(",")[0] for label, _, _ in rows] == ["TreasureHunt memory"] * 2 + ["TreasureHunt disk"] * 2
    assert all(rate > 0 and unit == "tool calls/s" for _, rate, unit in rows)


# --- the rules under the batch engine ---------------------------------------------------


def test_the_rules_run_on_the_batch_engine_with_masked_steps() -> None:
    from arena_envs.batch import Batch
    from arena_envs.treasure_hunt import TreasureHuntRules, hunt_params

    rules = TreasureHuntRules(hunt_params("easy"), "easy", "memory", max_steps=50, track_exploration=False)
    batch = Batch(rules, 3)
    batch.reset(seeds=[7, 8, 9])
    assert [batch.state.episode(i).hunt.config for i in range(3)] == [
        generate_treasure_hunt(seed=seed).config for seed in (7, 8, 9)
    ]
    before = batch.observe()
    active = np.array([True, False, True])
    rewards, terminations, truncations = batch.step([{"tool": "pwd"}, {"tool": "give_up"}, {"tool": "ls"}], active)
    after = batch.observe()
    assert after[1] == before[1] and after[0] != before[0] and after[2] != before[2]
    assert rewards.tolist() == [-0.01, 0.0, -0.01] and not terminations.any() and not truncations.any()
    assert batch.info()["turns"].tolist() == [1, 0, 1]
    unseeded = batch.state.episode(1).hunt.config["seed"]
    batch.reset([1])  # no seed: the world's own generator, seeded by its last seed
    assert batch.state.episode(1).hunt.config["seed"] != unseeded
    assert batch.state.episode(1).hunt.config["seed"] == int(np.random.default_rng(8).integers(2**63))
