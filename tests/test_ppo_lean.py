"""The lean PPO (``arena-train --algo ppo``): its pieces, and the run directory arena-eval reads."""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from stable_baselines3 import PPO

from arena_envs.cli import UsageError
from arena_envs.training import evaluate, ppo, train
from arena_envs.training.common import load_config

TINY = ["--n-envs", "8", "--timesteps", "1024", "--no-progress"]


def tiny_config(path, source: str, **changes):
    """A copy of a lean config with small rollouts, for quick runs."""
    config = yaml.safe_load(source.read_text()) if hasattr(source, "read_text") else source
    config["ppo"].update(n_steps=16, batch_size=64, n_epochs=1)
    config["env_kwargs"] = {**config.get("env_kwargs", {}), "max_ticks": 40}
    config.update(changes)
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_gae_matches_a_loop_over_rows_and_steps():
    rng = np.random.default_rng(0)
    T, N, gamma, lam = 7, 5, 0.9, 0.8
    rewards, values = rng.normal(size=(T, N)), rng.normal(size=(T, N))
    dones, next_value = rng.random((T, N)) < 0.3, rng.normal(size=N)
    expected = np.zeros((T, N))
    for n in range(N):
        running = 0.0
        for t in reversed(range(T)):
            after = next_value[n] if t == T - 1 else values[t + 1, n]
            if dones[t, n]:
                after, running = 0.0, 0.0
            running = rewards[t, n] + gamma * after - values[t, n] + gamma * lam * running
            expected[t, n] = running
    got = ppo.gae(*(torch.tensor(a, dtype=torch.float64) for a in (rewards, values, dones.astype(float),
                                                                     next_value)), gamma, lam)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)


def test_return_scaler_tracks_the_spread_of_discounted_returns():
    rng = np.random.default_rng(1)
    scaler = ppo.ReturnScaler(rows=4, gamma=0.9)
    returns, seen = np.zeros(4), []
    for _ in range(300):
        reward, done = rng.normal(3.0, 2.0, 4), rng.random(4) < 0.1
        scaled = scaler(reward, done)
        returns = returns * 0.9 + reward
        seen.append(returns.copy())
        np.testing.assert_allclose(scaled, np.clip(reward / np.sqrt(scaler.var + 1e-8), -10, 10))
        returns[done] = 0.0
    assert scaler.var == pytest.approx(np.var(np.concatenate(seen)), rel=1e-6)


def test_actions_sample_the_policy_and_predict_takes_its_mode():
    torch.manual_seed(0)
    agent = ppo.Agent(6, [3, 4], [16])
    with torch.no_grad():
        agent.action_head.bias.copy_(torch.tensor([5.0, 0, 0, 0, 0, 5.0, 0]))  # modes: 0 and 2
    obs = torch.zeros(20000, 6)
    with torch.no_grad():
        actions, logprob, value = agent.act(obs)
        logps = agent.log_probs(obs)
    assert actions.shape == (20000, 2) and value.shape == (20000,)
    for i, lp in enumerate(logps):  # sampled frequencies follow the probabilities
        freq = np.bincount(actions[:, i].numpy(), minlength=lp.shape[1]) / len(actions)
        np.testing.assert_allclose(freq, lp[0].exp().numpy(), atol=0.01)
    expected = logps[0].gather(1, actions[:, :1])[:, 0] + logps[1].gather(1, actions[:, 1:])[:, 0]
    torch.testing.assert_close(logprob, expected)
    mode, _ = agent.predict(np.zeros((3, 6), np.float32))
    np.testing.assert_array_equal(mode, [[0, 2]] * 3)


def test_unknown_ppo_keys_are_refused():
    with pytest.raises(ValueError, match="unknown keys in the ppo section"):
        ppo.PPOConfig.from_config({"ppo": {"n_stepz": 3}})


def test_foraging_run_directory_is_what_arena_eval_reads(tmp_path):
    out = tmp_path / "run"
    config = tiny_config(tmp_path / "c.yaml", ppo_config_path("foraging"))
    train.train(["Foraging-v0", "--config", config, "--out", str(out), *TINY])
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["algo"] == "ppo" and saved["n_envs"] == 8
    speed = json.loads((out / "speed.json").read_text())
    assert speed["algo"] == "ppo" and speed["timesteps"] == 1024 and speed["steps_per_s"] > 0
    rows = list(csv.DictReader((out / "progress.csv").open()))
    assert [int(r["time/total_timesteps"]) for r in rows] == [128 * (i + 1) for i in range(8)]
    assert any(r["rollout/score_mean"] for r in rows)  # 40-tick episodes ended and were scored
    assert list((out / "tb").rglob("events.out.tfevents.*"))
    assert all((out / "checkpoints" / f"ppo_1024_steps.{ext}").exists() for ext in ("zip", "pt"))

    # model.zip is an SB3 PPO model with the lean agent's weights: the same actions
    model = PPO.load(out / "model.zip", device="cpu")
    saved_state = torch.load(out / "checkpoints" / "ppo_1024_steps.pt", weights_only=False)
    obs = np.random.default_rng(0).uniform(-1, 1, (50, *model.observation_space.shape)).astype(np.float32)
    agent = ppo.Agent(obs.shape[1], model.action_space.nvec.tolist(), [64, 64], saved["policy_kwargs"]["activation"])
    agent.load_state_dict(saved_state["agent"])
    np.testing.assert_array_equal(model.predict(obs, deterministic=True)[0], agent.predict(obs)[0])
    with torch.no_grad():
        torch.testing.assert_close(model.policy.predict_values(torch.from_numpy(obs))[:, 0],
                                   agent.value(torch.from_numpy(obs)))

    summary = evaluate.evaluate([str(out), "Foraging-v0", "--episodes", "4"])
    assert set(summary) == {"ppo", "random", "scripted"}
    assert (out / "learning_curve.png").exists() and (out / "eval.md").exists()
    sampled = evaluate.evaluate([str(out), "Foraging-v0", "--episodes", "2", "--stochastic", "--rollout"])
    assert set(sampled) == set(summary) and (out / "rollout.gif").exists()


def test_resume_continues_the_run(tmp_path):
    out = tmp_path / "run"
    config = tiny_config(tmp_path / "c.yaml", ppo_config_path("foraging"))
    train.train(["Foraging-v0", "--config", config, "--out", str(out), *TINY])
    with pytest.raises(UsageError, match="holds a run already"):
        train.train(["Foraging-v0", "--config", config, "--out", str(out), *TINY])
    with pytest.raises(UsageError, match="--algo ppo"):
        train.train(["Foraging-v0", "--algo", "sb3-ppo", "--out", str(out), "--resume", *TINY])
    train.train(["Foraging-v0", "--out", str(out), "--resume", "--n-envs", "8", "--timesteps", "2048",
                 "--no-progress"])
    rows = list(csv.DictReader((out / "progress-from-1024.csv").open()))
    assert int(rows[0]["time/total_timesteps"]) == 1152 and int(rows[-1]["time/total_timesteps"]) == 2048
    assert (out / "checkpoints" / "ppo_2048_steps.zip").exists()


def test_sharded_training_is_the_same_training(tmp_path):
    """Two worker processes step (and encode) the batch: same seeds, same worlds, same weights."""
    weights = []
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        config = tiny_config(tmp_path / f"c{workers}.yaml", ppo_config_path("foraging"))
        train.train(["Foraging-v0", "--config", config, "--out", str(out), "--num-workers", str(workers), *TINY])
        weights.append(torch.load(out / "checkpoints" / "ppo_1024_steps.pt", weights_only=False)["agent"])
        assert json.loads((out / "speed.json").read_text())["num_workers"] == workers
    for key in weights[0]:
        torch.testing.assert_close(weights[0][key], weights[1][key], rtol=0, atol=0)


def test_team_capture_self_play_logs_its_evaluation(tmp_path):
    out = tmp_path / "run"
    config = tiny_config(tmp_path / "c.yaml", ppo_config_path("team_capture"), eval_every=512, eval_episodes=2)
    train.train(["team_capture_v0", "--config", config, "--out", str(out), "--n-envs", "2", "--timesteps", "1024",
                 "--no-progress"])
    rows = list(csv.DictReader((out / "progress.csv").open()))
    assert int(rows[-1]["time/total_timesteps"]) == 1024  # agent steps: 2 worlds x 4 agents x 16 ticks a rollout
    assert sum(bool(r["eval/return_mean"]) for r in rows) == 2
    summary = evaluate.evaluate([str(out), "team_capture_v0", "--episodes", "2"])
    assert "ppo vs scripted" in summary


def test_crafting_runs(tmp_path):
    out = tmp_path / "run"
    config = tiny_config(tmp_path / "c.yaml", ppo_config_path("crafting"))
    train.train(["Crafting-v0", "--config", config, "--out", str(out), *TINY])
    assert PPO.load(out / "model.zip", device="cpu").action_space.nvec.tolist()[0] == 4  # the config's four tools
    summary = evaluate.evaluate([str(out), "Crafting-v0", "--episodes", "2", "--stochastic"])
    assert set(summary) == {"ppo", "random", "scripted"}


def test_the_sb3_config_runs_under_either_trainer(tmp_path):
    """``--algo ppo --config configs/foraging.yaml``: the same config for both, to compare speed."""
    sb3 = load_config("Foraging-v0")
    assert "algo" not in sb3
    sb3["ppo"] = {k: v for k, v in sb3["ppo"].items()}
    for algo in ("ppo", "sb3-ppo"):
        out = tmp_path / algo
        train.train(["Foraging-v0", "--algo", algo, "--config", tiny_config(tmp_path / f"{algo}.yaml", dict(sb3)),
                     "--out", str(out), *TINY])
        assert json.loads((out / "speed.json").read_text())["timesteps"] >= 1024
        assert yaml.safe_load((out / "config.yaml").read_text())["algo"] == algo


def ppo_config_path(name: str):
    return ppo_configs() / f"{name}.yaml"


def ppo_configs():
    from arena_envs.training.common import CONFIG_DIR

    return CONFIG_DIR / "ppo"


def test_which_trainer_runs(tmp_path):
    """The lean PPO by default; SB3 for configs without an ``algo`` key unless --algo says otherwise."""
    lean = tiny_config(tmp_path / "lean.yaml", ppo_config_path("foraging"))
    with pytest.raises(UsageError, match="lean PPO's"):
        train.train(["Foraging-v0", "--algo", "sb3-ppo", "--config", lean, "--out", str(tmp_path / "x"), *TINY])
    sb3 = load_config("Foraging-v0")
    out = tmp_path / "sb3"
    train.train(["Foraging-v0", "--config", tiny_config(tmp_path / "sb3.yaml", sb3), "--out", str(out), *TINY])
    assert yaml.safe_load((out / "config.yaml").read_text())["algo"] == "sb3-ppo"
    assert (out / "vecnormalize.pkl").exists()  # SB3's VecNormalize statistics


def test_periodic_evaluation_is_logged_with_its_time_and_leaves_training_alone(tmp_path):
    """Sampled-action evaluation every 256 steps: eval/* rows, their time apart from training's,
    and the same weights as a run that never evaluates (evaluation draws from its own generator)."""
    weights = {}
    for every in (0, 256):
        out = tmp_path / f"every{every}"
        config = tiny_config(tmp_path / f"c{every}.yaml", ppo_config_path("foraging"), eval_every=every,
                             eval_episodes=3, eval_stochastic=True)
        train.train(["Foraging-v0", "--config", config, "--out", str(out), *TINY])
        weights[every] = torch.load(out / "checkpoints" / "ppo_1024_steps.pt", weights_only=False)["agent"]
        rows = list(csv.DictReader((out / "progress.csv").open()))
        evaluated = [r for r in rows if r["eval/score_mean"]]
        assert len(evaluated) == (4 if every else 0)  # after 256, 512, 768 and 1024 steps
        eval_seconds = [float(r["time/eval_seconds"]) for r in rows]
        assert eval_seconds == sorted(eval_seconds) and (eval_seconds[-1] > 0) == bool(every)
        speed = json.loads((out / "speed.json").read_text())
        assert speed["eval_seconds"] == pytest.approx(eval_seconds[-1], abs=0.5) and speed["cpu_seconds"] > 0
        assert float(rows[-1]["time/time_elapsed"]) <= speed["seconds"] + 1e-6
    for key in weights[0]:
        torch.testing.assert_close(weights[0][key], weights[256][key], rtol=0, atol=0)


def test_periodic_evaluation_samples_actions_when_asked(tmp_path):
    """eval_stochastic plays sampled actions, the same ones for the same seed; without it, the mode."""
    config = yaml.safe_load(ppo_config_path("foraging").read_text())
    config.update(env_id="arena_envs/Foraging-v0", eval_episodes=8, env_kwargs={"max_ticks": 100})
    envs = ppo.make_envs(config, 1)
    nvec = envs.single_action_space.nvec.tolist()
    torch.manual_seed(0)
    agent = ppo.Agent(envs.single_observation_space.shape[0], nvec, [16])
    envs.close()
    tools = config["encoding"]["tools"]
    with torch.no_grad():  # the most likely tool is query_world (no move, no collect), sampled ones walk too
        agent.action_head.bias[:nvec[0]] = torch.tensor([0.5 * (t == "query_world") for t in tools])
    modes = ppo.periodic_eval(agent, {**config, "eval_stochastic": False})
    sampled = [ppo.periodic_eval(agent, {**config, "eval_stochastic": True}) for _ in range(2)]
    assert modes["eval/score_mean"] == 0 < sampled[0]["eval/score_mean"]
    assert sampled[0] == sampled[1]


def test_arena_bench_training_row_sets_training_against_its_envs_alone(capsys):
    from arena_envs import bench

    rows = dict((name, rate) for name, rate, _ in bench.run(["--only", "training", "--seconds", "1"]))
    assert 0 < rows[bench.TRAINING_ROW] < rows[bench.TRAINING_ENV_ROW]
    assert 0 < rows[bench.TRAINING_SYNC_ROW] < rows[bench.TRAINING_ENV_ROW]
    printed = capsys.readouterr().out
    assert f"{bench.TRAINING_ROW} / {bench.TRAINING_ENV_ROW}:" in printed
    assert f"{bench.TRAINING_ROW} / {bench.TRAINING_SYNC_ROW}:" in printed


@pytest.mark.parametrize("async_learner, updates", [(False, 25), (True, 50)])
def test_a_short_foraging_run_learns(tmp_path, async_learner, updates):
    """Learning itself, end to end: the shipped Foraging config on 64 worlds of 100 ticks, 2,048
    steps an update. The losses move and the score of the sampled actions in training rises by
    more than 8 (about 6 to 15 in 25 updates here; one update behind, the async learner takes
    about 50 to get as far at this scale): a broken gradient, advantage, return scale, sampler or
    weight hand-over fails it."""
    out = tmp_path / "run"
    config = yaml.safe_load(ppo_config_path("foraging").read_text())
    config["ppo"].update(batch_size=1024)
    config.update(env_kwargs={**config["env_kwargs"], "max_ticks": 100}, eval_every=0, async_learner=async_learner)
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    train.train(["Foraging-v0", "--config", str(tmp_path / "c.yaml"), "--out", str(out), "--n-envs", "64",
                 "--timesteps", str(2048 * updates), "--no-progress"])
    rows = list(csv.DictReader((out / "progress.csv").open()))
    scores = [float(r["rollout/score_mean"]) for r in rows if r["rollout/score_mean"]]
    assert len({r["train/value_loss"] for r in rows}) == len({r["train/policy_gradient_loss"] for r in rows}) == updates
    assert scores[-1] > scores[0] + 8, scores


def final_weights(out):
    return torch.load(out / "checkpoints" / "ppo_1024_steps.pt", weights_only=False)


def test_async_learner_is_deterministic_and_one_update_behind(tmp_path):
    """The update in a learner process: the same seed gives the same weights, optimiser state and log
    however the two processes' timing falls; they differ from the in-process update's (the policy
    lags one update, the learner shuffles minibatches with a generator of its own)."""
    runs = {}
    for name, asynchronous in (("a", True), ("b", True), ("sync", False)):
        out = tmp_path / name
        config = tiny_config(tmp_path / f"{name}.yaml", ppo_config_path("foraging"), async_learner=asynchronous)
        train.train(["Foraging-v0", "--config", config, "--out", str(out), *TINY])
        speed = json.loads((out / "speed.json").read_text())
        assert speed["async_learner"] is asynchronous and (speed["learner_cpu_seconds"] > 0) is asynchronous
        rows = list(csv.DictReader((out / "progress.csv").open()))
        runs[name] = final_weights(out), [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]
    (a, a_rows), (b, b_rows), (sync, _) = runs["a"], runs["b"], runs["sync"]
    torch.testing.assert_close(a["agent"], b["agent"], rtol=0, atol=0)
    torch.testing.assert_close(a["optimizer"]["state"], b["optimizer"]["state"], rtol=0, atol=0)
    assert a_rows == b_rows and len(a_rows) == 8
    assert not torch.equal(a["agent"]["action_head.weight"], sync["agent"]["action_head.weight"])


def learner_children():
    return [p for p in multiprocessing.active_children() if p.name == "ppo-learner"]


def test_a_learner_that_fails_raises_its_error_and_leaves_no_process(tmp_path, monkeypatch):
    def broken_update(*args):
        raise FloatingPointError("a broken update")

    monkeypatch.setattr(ppo, "ppo_update", broken_update)  # the forked learner calls this one
    config = tiny_config(tmp_path / "c.yaml", ppo_config_path("foraging"), async_learner=True)
    with pytest.raises(RuntimeError, match="(?s)learner process failed.*FloatingPointError: a broken update"):
        train.train(["Foraging-v0", "--config", config, "--out", str(tmp_path / "run"), *TINY])
    assert not learner_children()


def test_a_learner_killed_mid_run_is_reported_not_waited_for(tmp_path):
    def kill_learner(agent, steps):
        for process in learner_children():
            os.kill(process.pid, signal.SIGKILL)

    config = load_config("Foraging-v0", ppo_config_path("foraging"))
    config.update(n_envs=8, timesteps=1024, checkpoint_every=256, eval_every=0, async_learner=True)
    config["ppo"].update(n_steps=16, batch_size=64, n_epochs=1)
    with pytest.raises(RuntimeError, match=r"learner process died \(exit code -9\)"):
        ppo.train(config, tmp_path / "run", progress=False, on_checkpoint=kill_learner)
    assert not learner_children()


def test_an_error_in_the_trainer_ends_its_learner(tmp_path):
    def fail(agent, steps):
        raise ValueError("a failing checkpoint hook")

    config = load_config("Foraging-v0", ppo_config_path("foraging"))
    config.update(n_envs=8, timesteps=1024, checkpoint_every=256, eval_every=0, async_learner=True)
    config["ppo"].update(n_steps=16, batch_size=64, n_epochs=1)
    with pytest.raises(ValueError, match="a failing checkpoint hook"):
        ppo.train(config, tmp_path / "run", progress=False, on_checkpoint=fail)
    assert not learner_children()


def test_ctrl_c_stops_the_trainer_and_its_learner(tmp_path):
    """SIGINT to the process group (what Ctrl-C sends): arena-train and its learner process both end."""
    out = tmp_path / "run"
    config = tiny_config(tmp_path / "c.yaml", ppo_config_path("foraging"), async_learner=True)
    trainer = subprocess.Popen([sys.executable, "-m", "arena_envs.training.train", "Foraging-v0", "--config", config,
                                "--out", str(out), "--n-envs", "8", "--timesteps", str(10**9), "--no-progress"],
                               start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not ((out / "progress.csv").exists() and len((out / "progress.csv").read_text().splitlines()) > 2):
            assert trainer.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        children = [int(pid) for pid in Path(f"/proc/{trainer.pid}/task/{trainer.pid}/children").read_text().split()]
        assert children  # the learner
        os.killpg(trainer.pid, signal.SIGINT)
        trainer.wait(timeout=30)
    finally:
        if trainer.poll() is None:
            os.killpg(trainer.pid, signal.SIGKILL)
    assert trainer.returncode != 0 and b"KeyboardInterrupt" in trainer.stderr.read()
    for pid in children:
        status = Path(f"/proc/{pid}/status")
        assert not status.exists() or "zombie" in status.read_text(), f"learner {pid} left running"
