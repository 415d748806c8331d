"""RecordEpisodes in every form, arena-eval --record, and that a recording redraws the episode it
was made from (states carried forward tick by tick equal the world's at each tick)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import arena_envs  # noqa: F401  (registers the environments)
from arena_envs import team_capture_v0
from arena_envs.render.replay import CARRIED, FORMAT
from arena_envs.scripted import ScriptedForager
from arena_envs.training.evaluate import main as arena_eval
from arena_envs.wrappers.record import EPISODES_FILE, RecordEpisodes, read_episodes


def replayed(episode: dict) -> list[dict]:
    """Every tick of a recorded episode whole: each carried key taken from the last tick that had it."""
    state: dict = {}
    ticks = []
    for tick in episode["ticks"]:
        state = {**{k: v for k, v in state.items() if k in CARRIED}, **tick}
        ticks.append(state)
    return ticks


def test_a_single_env_episode_redraws_tick_by_tick(tmp_path):
    env = RecordEpisodes(gym.make("arena_envs/Foraging-v0"), tmp_path)
    assert isinstance(env, RecordEpisodes)
    obs, _ = env.reset(seed=3)
    forager, state = ScriptedForager(env.unwrapped.scenario.params), env.unwrapped.state
    seen, rewards, done = [(state.x[0, 0], state.z[0, 0], state.ent_alive[0].sum())], [], False
    while not done:
        obs, reward, terminated, truncated, info = env.step(forager.act(obs))
        seen.append((state.x[0, 0], state.z[0, 0], state.ent_alive[0].sum()))
        rewards.append(reward)
        done = terminated or truncated
    env.close()
    (episode,) = read_episodes(tmp_path / EPISODES_FILE)
    assert episode["format"] == FORMAT and episode["scenario"] == "foraging" and episode["seed"] == 3
    summary = episode["summary"]
    assert summary["return"] == pytest.approx(sum(rewards), abs=1e-3) and summary["length"] == len(rewards)
    assert summary["success"] == info["success"] and summary["score"] == pytest.approx(info["score"], abs=1e-3)
    assert summary["error"] is None
    ticks = replayed(episode)
    assert [t["t"] for t in ticks] == list(range(len(seen)))
    for tick, (x, z, alive) in zip(ticks, seen, strict=True):
        assert tick["pos"][0] == pytest.approx([x, z], abs=0.006)
        assert sum(e[3] for e in tick["entities"]) == alive
    assert any("entities" not in t for t in episode["ticks"][1:])  # unchanged state is not written again
    moves = [t for t in episode["ticks"] if t.get("act", {}).get("tool") == "move_to"]
    assert moves and moves[0]["result"] == ["OK"] and len(moves[0]["act"]["params"]) == 3
    legend = {entry["label"] for entry in episode["world"]["legend"]}
    assert {"agent", "berry", "tree"} <= legend


def test_a_vector_env_records_every_episode_of_its_worlds_with_seeds(tmp_path):
    envs = RecordEpisodes(gym.make_vec("arena_envs/Foraging-v0", num_envs=3, max_ticks=15), tmp_path, compress=True)
    envs.reset(seed=10)
    envs.action_space.seed(0)
    for _ in range(40):  # two whole episodes in each world, the third under way (not written)
        envs.step(envs.action_space.sample())
    envs.close()
    episodes = read_episodes(tmp_path / (EPISODES_FILE + ".gz"))
    assert len(episodes) == 6 and all(e["summary"]["length"] == 15 for e in episodes)
    assert sorted(e["seed"] for e in episodes if e["seed"] is not None) == [10, 11, 12]
    assert all(replayed(e)[-1]["t"] == 15 and replayed(e)[0]["t"] == 0 for e in episodes)

    # world 1 of the batch plays as a single env seeded 11: the same first tick
    single = RecordEpisodes(gym.make("arena_envs/Foraging-v0", max_ticks=15), tmp_path / "single")
    single.reset(seed=11)
    single.close()
    first = next(e for e in episodes if e["seed"] == 11)["ticks"][0]
    assert first["pos"] == single.reader.ticks.previous["pos"][0].tolist()


def test_vector_recording_needs_next_step_autoreset(tmp_path):
    with pytest.raises(ValueError, match="NEXT_STEP"):
        RecordEpisodes(gym.make_vec("arena_envs/Foraging-v0", num_envs=2, autoreset_mode="SameStep"), tmp_path)
    with pytest.raises(TypeError, match="ParallelEnv"):
        RecordEpisodes(object(), tmp_path)


def test_team_capture_parallel_and_vector_record_points_scores_and_messages(tmp_path):
    env = RecordEpisodes(team_capture_v0.parallel_env(max_cycles=40), tmp_path / "parallel")
    env.reset(seed=2)
    rng = np.random.default_rng(0)
    while env.agents:
        actions = {}
        for a in env.agents:
            action = env.action_space(a).sample()
            action["tool"] = 5 if rng.random() < 0.3 else 0  # send_message or move_to
            actions[a] = action
        env.step(actions)
    env.close()
    (episode,) = read_episodes(tmp_path / "parallel" / EPISODES_FILE)
    world = episode["world"]
    assert episode["scenario"] == "team_capture" and world["teams"] == [0, 0, 1, 1]
    assert len(world["points"]) == 5 and world["message_range"] > 0
    ticks = replayed(episode)
    assert all(len(t["points"]) == 5 and len(t["score"]) == 2 for t in ticks)
    messages = [m for t in ticks for m in t.get("messages", [])]
    assert messages and all(0 <= m["from"] < 4 for m in messages)
    assert any(m["reached"] and m["token"] is not None for m in messages)
    assert len(episode["ticks"][1]["r"]) == 4 and len(episode["ticks"][1]["act"]) == 4

    envs = RecordEpisodes(team_capture_v0.vector_env(num_envs=2, max_cycles=10), tmp_path / "vector")
    envs.reset(seed=0)
    envs.action_space.seed(0)
    for _ in range(11):
        envs.step(envs.action_space.sample())
    envs.close()
    episodes = read_episodes(tmp_path / "vector" / EPISODES_FILE)
    assert [e["seed"] for e in episodes] == [0, 1] and all(len(e["ticks"][1]["act"]) == 4 for e in episodes)


def test_treasure_hunt_records_the_text_world(tmp_path):
    env = RecordEpisodes(gym.make("arena_envs/TreasureHunt-v0", render_mode="ansi"), tmp_path)
    env.reset(seed=1)
    env.step({"tool": "cat", "file": "start.txt"})
    env.step({"tool": "give_up"})
    env.close()
    (episode,) = read_episodes(tmp_path / EPISODES_FILE)
    assert episode["scenario"] == "treasure_hunt" and episode["world"]["kind"] == "text"
    ticks = replayed(episode)
    assert [t["t"] for t in ticks] == [0, 1, 2] and ticks[1]["act"] == {"tool": "cat", "file": "start.txt"}
    assert ticks[2]["cwd"] == "/" and "gave up" in ticks[2]["obs"] and "start.txt (read)" in ticks[2]["view"]


def test_arena_eval_record_writes_every_episode_of_every_row(tmp_path):
    arena_eval(["scripted", "Foraging-v0", "--episodes", "3", "--out", str(tmp_path), "--record",
                str(tmp_path / "rec"), "--seed", "5"])
    episodes = read_episodes(tmp_path / "rec" / EPISODES_FILE)
    assert sorted((e["agent"], e["seed"]) for e in episodes) == [(a, s) for a in ("random", "scripted")
                                                                   for s in (5, 6, 7)]
    assert all(e["source"] == "arena-eval" for e in episodes)
    scripted = [e for e in episodes if e["agent"] == "scripted"]
    assert all(e["summary"]["success"] for e in scripted)


def test_arena_bench_recording_rows_measure_sizes_and_both_ways(capsys):
    from arena_envs import bench

    rows = {name: rate for name, rate, _ in bench.run(["--seconds", "0.05", "--only", "recording"])}
    sizes = [rate for name, rate in rows.items() if name.startswith("Recording:")]
    assert len(sizes) == 4 and all(size > 1000 for size in sizes)
    assert rows["Foraging native batch B=64, RecordEpisodes on"] > 0
    assert rows["Foraging native batch B=64, RecordEpisodes off"] > 0
    assert "RecordEpisodes on / Foraging native batch B=64, RecordEpisodes off" in capsys.readouterr().out
