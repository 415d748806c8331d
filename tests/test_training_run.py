"""arena-train and arena-eval end to end: a short PPO run, its outputs, resume, evaluation."""

from __future__ import annotations

import configparser
import csv
import importlib
import json
from pathlib import Path

import pytest
import yaml

from arena_envs.training.common import CONFIG_DIR, load_config
from arena_envs.training.evaluate import evaluate
from arena_envs.training.train import latest_checkpoint, train

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def tiny_config(tmp_path) -> Path:
    """The Foraging config, shrunk so that PPO runs a few updates in seconds."""
    config = load_config("Foraging-v0")
    config["env_kwargs"]["max_ticks"] = 40  # episodes end within the run
    config["ppo"].update(n_steps=32, batch_size=128, n_epochs=2)
    config["policy_kwargs"] = {"net_arch": [32, 32]}
    config["checkpoint_every"] = 512
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def rows(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def test_train_resume_and_evaluate_write_their_outputs(tmp_path, tiny_config):
    run = tmp_path / "run"
    common = ["Foraging-v0", "--config", str(tiny_config), "--n-envs", "8", "--seed", "1", "--out", str(run),
              "--no-progress"]
    assert train(common + ["--timesteps", "1024"]) == run
    for name in ("config.yaml", "model.zip", "vecnormalize.pkl", "progress.csv", "speed.json"):
        assert (run / name).is_file(), name
    assert yaml.safe_load((run / "config.yaml").read_text())["n_envs"] == 8
    log = rows(run / "progress.csv")
    assert len(log) == 1024 // (8 * 32) and float(log[-1]["time/total_timesteps"]) == 1024
    assert {"rollout/score_mean", "rollout/success_rate", "train/loss"} <= set(log[-1])
    assert any(p.name.startswith("events.out.tfevents") for p in (run / "tb").rglob("*"))
    assert latest_checkpoint(run / "checkpoints")[1] == 1024
    assert (run / "checkpoints" / "ppo_vecnormalize_1024_steps.pkl").is_file()
    speed = json.loads((run / "speed.json").read_text())
    assert speed["steps_per_s"] > 0 and 0 < speed["env_share"] < 1

    with pytest.raises(SystemExit, match="--resume"):  # a finished run is never overwritten by accident
        train(common + ["--timesteps", "2048"])
    train(common + ["--timesteps", "2048", "--resume"])
    assert latest_checkpoint(run / "checkpoints")[1] == 2048
    resumed = rows(run / "progress-from-1024.csv")
    assert float(resumed[0]["time/total_timesteps"]) > 1024 and float(resumed[-1]["time/total_timesteps"]) == 2048

    summary = evaluate([str(run), "Foraging-v0", "--episodes", "4", "--rollout"])
    assert list(summary) == ["ppo", "random", "scripted"]
    assert summary["ppo"]["length_mean"] <= 40  # the run's own env arguments were used
    table = (run / "eval.md").read_text()
    assert all(f"| {name}" in table for name in summary)
    assert (run / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (run / "rollout.gif").read_bytes()[:6] == b"GIF89a"
    ticks = [json.loads(line) for line in (run / "rollout.jsonl").read_text().splitlines()]
    assert 0 < len(ticks) <= 40 and set(ticks[0]) == {"tick", "agents", "reward", "info"}
    assert {"tool", "params", "result", "x", "z"} <= set(ticks[0]["agents"][0]) and "score" in ticks[-1]["info"]


def test_baseline_evaluation_ranks_scripted_above_random(tmp_path):
    summary = evaluate(["scripted", "Foraging-v0", "--episodes", "16", "--out", str(tmp_path)])
    assert list(summary) == ["scripted", "random"]
    assert summary["scripted"]["score_mean"] > 50 > summary["random"]["score_mean"]
    assert summary["scripted"]["success_mean"] > summary["random"]["success_mean"]
    assert not (tmp_path / "learning_curve.png").exists()  # no training run, no curve


def test_dummy_vec_env_training_runs_for_the_speed_comparison(tmp_path, tiny_config):
    run = train(["Foraging-v0", "--config", str(tiny_config), "--n-envs", "4", "--timesteps", "256",
                 "--out", str(tmp_path / "dummy"), "--vec", "dummy", "--no-progress"])
    speed = json.loads((run / "speed.json").read_text())
    assert speed["vec"] == "dummy" and speed["timesteps"] == 256


def test_every_scenario_config_loads_and_unknown_envs_say_what_exists():
    assert (CONFIG_DIR / "foraging.yaml").is_file()
    config = load_config("arena_envs/Foraging-v0")
    assert config["env_id"] == "arena_envs/Foraging-v0" and config["encoding"]["tools"]
    with pytest.raises(FileNotFoundError, match="foraging"):
        load_config("Nowhere-v0")


def test_console_scripts_point_at_callables():
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    scripts = dict(line.split(" = ") for line in setup["options.entry_points"]["console_scripts"].split("\n") if line)
    for name in ("arena-train", "arena-eval"):
        module, function = scripts[name].split(":")
        assert callable(getattr(importlib.import_module(module), function))
    assert "configs/*.yaml" in setup["options.package_data"]["arena_envs.training"]


def test_ppo_learns_foraging_within_twenty_seconds_of_training(tmp_path):
    """400k steps of the shipped config (about 20 s here): the sampled policy already collects
    several times what the random agent does (about 14 against 3)."""
    run = train(["Foraging-v0", "--timesteps", "400000", "--seed", "0", "--out", str(tmp_path / "ppo"),
                 "--no-progress"])
    summary = evaluate([str(run), "Foraging-v0", "--episodes", "64", "--stochastic"])
    assert summary["ppo"]["score_mean"] > 2 * summary["random"]["score_mean"]
    assert summary["ppo"]["return_mean"] > 2 * summary["random"]["return_mean"]


@pytest.mark.parametrize("env", ["Crafting-v0", "team_capture_v0"])
def test_short_runs_of_the_other_scenarios_write_their_outputs(tmp_path, env):
    config = load_config(env)
    config["env_kwargs"]["max_cycles" if env == "team_capture_v0" else "max_ticks"] = 40
    config["ppo"].update(n_steps=32, batch_size=128, n_epochs=1)
    config.update(policy_kwargs={"net_arch": [32]}, eval_every=512, eval_episodes=2)
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(config))
    run = train([env, "--config", str(tmp_path / "tiny.yaml"), "--n-envs", "4", "--timesteps", "1024",
                 "--out", str(tmp_path / "run"), "--no-progress"])
    log = rows(run / "progress.csv")
    assert float(log[-1]["time/total_timesteps"]) == 1024 and (run / "model.zip").is_file()
    evaluated = [r for r in log if r["eval/success_rate"]]
    assert len(evaluated) == 2 and all(r["eval/return_mean"] for r in evaluated)  # at 0 and after 512 steps
    summary = evaluate([str(run), env, "--episodes", "2", "--rollout"])
    if env == "team_capture_v0":  # every agent as blue against each baseline team as red
        assert list(summary) == [f"{a} vs {b}" for a in ("ppo", "random", "scripted") for b in ("random", "scripted")]
        assert summary["scripted vs random"]["length_mean"] == 40  # the run's own env arguments
    else:
        assert list(summary) == ["ppo", "random", "scripted"]
    assert (run / "learning_curve.png").is_file() and (run / "rollout.gif").is_file()
