"""arena-train and arena-eval end to end: a short PPO run, its outputs, resume, evaluation."""

from __future__ import annotations

import configparser
import csv
import importlib
import json
from pathlib import Path

import pytest
import yaml
from PIL import Image

from arena_envs.cli import UsageError
from arena_envs.names import UnknownNameError
from arena_envs.render import MAP_PIXELS
from arena_envs.training.common import CONFIG_DIR, load_config
from arena_envs.training.evaluate import evaluate, read_progress
from arena_envs.training.train import latest_checkpoint, train
from arena_envs.wrappers.sb3 import Sb3VecEnv

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


def test_train_resume_and_evaluate_write_their_outputs(tmp_path, tiny_config, capsys, monkeypatch):
    world_seeds, original_reset = [], Sb3VecEnv.reset  # the seeds each training batch starts its worlds from

    def reset_recording_seeds(self):
        world_seeds.append(list(self._seeds))
        return original_reset(self)

    monkeypatch.setattr(Sb3VecEnv, "reset", reset_recording_seeds)
    run = tmp_path / "run"
    common = ["Foraging-v0", "--algo", "sb3-ppo", "--config", str(tiny_config), "--n-envs", "8", "--seed", "1",
              "--out", str(run), "--no-progress"]
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

    with pytest.raises(UsageError, match="--resume"):  # a finished run is never overwritten by accident
        train(common + ["--timesteps", "2048"])
    train(common + ["--timesteps", "2048", "--resume"])
    assert latest_checkpoint(run / "checkpoints")[1] == 2048
    resumed = rows(run / "progress-from-1024.csv")
    assert float(resumed[0]["time/total_timesteps"]) > 1024 and float(resumed[-1]["time/total_timesteps"]) == 2048
    first, then = world_seeds[0], world_seeds[-1]
    assert first == list(range(1, 9)) and None not in then and not set(then) & set(first)  # new worlds, seeded

    capsys.readouterr()
    summary = evaluate([str(run), "Foraging-v0", "--episodes", "4", "--rollout"])
    assert list(summary) == ["ppo", "random", "scripted"]
    assert summary["ppo"]["length_mean"] <= 40  # the run's own env arguments were used
    table = (run / "eval.md").read_text()
    assert table.strip() in capsys.readouterr().out  # printed as well as written
    header, _, *lines = table.splitlines()[2:]
    assert [c.strip() for c in header.strip("|").split("|")] == ["agent", "return", "score", "success", "length"]
    for line, (name, stats) in zip(lines, summary.items(), strict=True):  # one row per agent: mean ± std
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] == name and all(" ± " in c for c in cells[1:])
        assert float(cells[2].split(" ± ")[0]) == pytest.approx(stats["score_mean"], abs=0.05)
    assert (run / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (run / "rollout.gif").read_bytes()[:6] == b"GIF89a"
    assert Image.open(run / "rollout.gif").size[0] == MAP_PIXELS  # the default frame: 512 wide, with its legend
    ticks = [json.loads(line) for line in (run / "rollout.jsonl").read_text().splitlines()]
    assert 0 < len(ticks) <= 40 and set(ticks[0]) == {"tick", "agents", "reward", "info"}
    assert {"tool", "params", "result", "x", "z"} <= set(ticks[0]["agents"][0]) and "score" in ticks[-1]["info"]

    # a checkpoint is evaluated with its run's config, and the curve is still the whole run's
    evaluate([str(run / "checkpoints" / "ppo_1024_steps.zip"), "Foraging-v0", "--episodes", "2",
              "--out", str(tmp_path / "checkpoint")])
    assert (tmp_path / "checkpoint" / "learning_curve.png").is_file()


def test_learning_curve_replaces_what_an_interrupted_segment_logged_after_its_checkpoint(tmp_path):
    """Killed at 1500 steps with a checkpoint at 1000, then resumed from it: the curve goes
    1000 -> 1200 (the resumed segment), not 1000 -> 1500 -> 1200."""
    def write(name, steps):
        with (tmp_path / name).open("w", newline="") as fh:
            out = csv.writer(fh)
            out.writerow(["time/total_timesteps", "rollout/score_mean"])
            out.writerows([s, s / 100] for s in steps)

    write("progress.csv", [500, 1000, 1500])
    write("progress-from-1000.csv", [1200, 1400, 1600, 1800])
    rows, resumed_at = read_progress(tmp_path, "rollout/score_mean")
    assert [int(r["time/total_timesteps"]) for r in rows] == [500, 1000, 1200, 1400, 1600, 1800]
    assert resumed_at == [1000]


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
    with pytest.raises(UnknownNameError, match="did you mean 'Foraging-v0'"):
        load_config("Foragin-v0")


def test_console_scripts_point_at_callables():
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    scripts = dict(line.split(" = ") for line in setup["options.entry_points"]["console_scripts"].split("\n") if line)
    for name in ("arena-train", "arena-eval"):
        module, function = scripts[name].split(":")
        assert callable(getattr(importlib.import_module(module), function))
    assert "configs/*.yaml" in setup["options.package_data"]["arena_envs.training"]


def test_ppo_learns_foraging_within_twenty_seconds_of_training(tmp_path):
    """300k steps of the shipped config (about 15 s here): the sampled policy already collects
    several times what the random agent does (score about 12 against 3, return 1.3 against 0.2)."""
    run = train(["Foraging-v0", "--timesteps", "300000", "--seed", "0", "--out", str(tmp_path / "ppo"),
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
    run = train([env, "--algo", "sb3-ppo", "--config", str(tmp_path / "tiny.yaml"), "--n-envs", "4",
                 "--timesteps", "1024", "--out", str(tmp_path / "run"), "--no-progress"])
    log = rows(run / "progress.csv")
    assert float(log[-1]["time/total_timesteps"]) == 1024 and (run / "model.zip").is_file()
    evaluated = [r for r in log if r["eval/success_rate"]]
    assert len(evaluated) == 2 and all(r["eval/return_mean"] for r in evaluated)  # at 0 and after 512 steps
    summary = evaluate([str(run), env, "--episodes", "2", "--rollout"])
    stochastic = evaluate([str(run), env, "--episodes", "2", "--stochastic", "--out", str(tmp_path / "stochastic")])
    assert list(stochastic) == list(summary) and (tmp_path / "stochastic" / "eval.md").is_file()
    if env == "team_capture_v0":  # every agent as blue against each baseline team as red
        assert list(summary) == [f"{a} vs {b}" for a in ("ppo", "random", "scripted") for b in ("random", "scripted")]
        assert summary["scripted vs random"]["length_mean"] == 40  # the run's own env arguments
    else:
        assert list(summary) == ["ppo", "random", "scripted"]
    assert (run / "learning_curve.png").is_file() and (run / "rollout.gif").is_file()
