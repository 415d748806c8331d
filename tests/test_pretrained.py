"""Shipped policies (arena_envs.pretrained): the exporter, the numpy forward pass, and the name
``pretrained`` wherever an agent is named, with torch unimportable on that path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from cli_helpers import one_line, run_cli

from arena_envs import pretrained
from arena_envs.cli import UsageError, arena_agent, arena_eval, arena_view
from arena_envs.sharded import make_native_env
from arena_envs.training import ppo
from arena_envs.training.common import ModelAgent, agent_factory, load_config, play
from arena_envs.training.export import export
from arena_envs.wrappers.flatten import FlatEncoding

ROOT = Path(__file__).resolve().parents[1]


def untrained_run(folder: Path, scenario: str, net_arch=(16, 8), activation: str = "tanh") -> tuple[Path, ppo.Agent]:
    """A run directory as arena-train writes it (config.yaml, model.zip via save_sb3), of an untrained
    lean agent with random weights: what the exporter reads, without training anything."""
    config = load_config(scenario, f"ppo/{scenario}")
    config.update(seed=0, policy_kwargs={"net_arch": list(net_arch), "activation": activation})
    envs = make_native_env(config["env_id"], 1, **config.get("env_kwargs", {}))
    encoding = FlatEncoding.for_env(envs, **config["encoding"])
    envs.close()
    torch.manual_seed(3)
    agent = ppo.Agent(encoding.observation_space.shape[0], encoding.action_space.nvec.tolist(), list(net_arch),
                      activation)
    for layer in [*agent.policy_net[::2], agent.action_head]:  # weights big enough for every layer to matter
        torch.nn.init.normal_(layer.weight, std=0.5)
        torch.nn.init.normal_(layer.bias, std=0.5)
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    ppo.save_sb3(agent, config, folder / "model.zip")
    return folder, agent


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_the_exported_numpy_policy_computes_the_torch_policy(tmp_path, activation):
    run, agent = untrained_run(tmp_path / "run", "foraging", activation=activation)
    path = export(run, tmp_path / "foraging.npz")
    policy = pretrained.PretrainedPolicy.read(path)
    obs = np.random.default_rng(0).uniform(-1, 1, (64, policy.obs_size)).astype(np.float32)
    with torch.no_grad():
        expected = agent.action_head(agent.policy_net(torch.from_numpy(obs))).numpy()
    np.testing.assert_allclose(policy.logits(obs), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(policy.predict(obs), agent.predict(obs)[0])
    assert policy.metadata["run"]["directory"] == str(run) and policy.metadata["scenario"] == "foraging"
    assert policy.metadata["encoding"] == load_config("foraging", "ppo/foraging")["encoding"]


def test_sampled_actions_follow_the_policy_and_repeat_with_the_seed(tmp_path):
    policy = pretrained.PretrainedPolicy.read(export(untrained_run(tmp_path / "run", "foraging")[0],
                                                     tmp_path / "f.npz"))
    obs = np.zeros((20_000, policy.obs_size), np.float32)  # one state, many draws
    first = policy.predict(obs, np.random.default_rng(1))
    np.testing.assert_array_equal(first, policy.predict(obs, np.random.default_rng(1)))
    logits = policy.logits(obs[:1])[0]
    tool = np.exp(logits[:policy.nvec[0]] - logits[:policy.nvec[0]].max())
    frequencies = np.bincount(first[:, 0], minlength=policy.nvec[0]) / len(first)
    np.testing.assert_allclose(frequencies, tool / tool.sum(), atol=0.015)


def test_a_models_sampled_evaluation_repeats_with_its_seed(tmp_path):
    """arena-eval of a trained model with sampled actions (make results' final evaluation): the same seed
    plays the same episodes whatever torch's global generator holds, another seed others."""
    run, _ = untrained_run(tmp_path / "run", "foraging")
    scores = []
    for seed, noise in ((10_000, 1), (10_000, 2), (10_001, 1)):
        torch.manual_seed(noise)  # what else ran before must not matter
        played = play(agent_factory(str(run / "model.zip"), "foraging", seed, deterministic=False), "foraging", 8,
                      10_000)
        scores.append((played["score"].tolist(), played["length"].tolist()))
    assert scores[0] == scores[1] and scores[0] != scores[2]


def test_a_policy_acts_the_same_on_a_world_alone_and_in_a_batch(tmp_path):
    """Batch invariance and determinism: world i's actions do not depend on the other worlds."""
    policy = pretrained.PretrainedPolicy.read(export(untrained_run(tmp_path / "run", "foraging")[0],
                                                     tmp_path / "f.npz"))
    envs = make_native_env("foraging", 4, **policy.env_kwargs)
    obs, _ = envs.reset(seed=5)
    agent = policy.agent(envs, deterministic=True)
    together = agent.act(obs)
    logits = policy.logits(agent.encoding.observe(obs))
    assert len({tuple(row) for row in logits.round(4)}) == 4  # the worlds differ: a row mix-up would show
    for i in range(4):
        alone = agent.act({k: v[i:i + 1] for k, v in obs.items()})
        assert_rows_equal(alone, together, i)
    envs.close()


def test_a_league_policy_holds_its_decisions_as_the_league_trained_it(tmp_path):
    """The league's learner decides on team capture's events, 30 ticks apart at most
    (league.decide_on_events, league.action_repeat): the exported numpy policy holds its
    decisions so, tick for tick as its run's torch model plays in arena-eval."""
    run, _ = untrained_run(tmp_path / "run", "team_capture")
    league = yaml.safe_load((run / "config.yaml").read_text())["league"]
    policy = pretrained.PretrainedPolicy.read(export(run, tmp_path / "t.npz"))
    assert (policy.action_repeat, policy.decide_on_events) == (league["action_repeat"], True)
    envs = make_native_env("team_capture", 4, **policy.env_kwargs)
    numpy_agent, torch_agent = policy.agent(envs, deterministic=True), ModelAgent.load(run / "model.zip", envs)
    obs, _ = envs.reset(seed=0)
    moves = []
    for _ in range(120):
        blue = {key: v[:, :2] for key, v in obs.items()}
        actions, same = numpy_agent.act(blue), torch_agent.act(blue)
        np.testing.assert_array_equal(actions["tool"], same["tool"])
        np.testing.assert_allclose(actions["move_to"], same["move_to"], atol=1e-4)
        moves.append(actions["move_to"].copy())
        both = {key: (np.concatenate([v, v], 1) if not isinstance(v, dict)
                      else {kk: np.concatenate([vv, vv], 1) for kk, vv in v.items()}) for key, v in actions.items()}
        obs, *_ = envs.step(both)
    changes = (np.diff(np.array(moves), axis=0) != 0).any((2, 3)).sum(0)  # decisions that changed, per world
    assert changes.max() > 120 // 30 and (changes < 100).all(), changes  # more often than every 30 ticks, held
    envs.close()


def assert_rows_equal(alone, together, i: int) -> None:
    if isinstance(alone, dict):
        for key in alone:
            assert_rows_equal(alone[key], together[key], i)
    else:
        np.testing.assert_array_equal(np.asarray(alone)[0], np.asarray(together)[i])


def test_the_export_refuses_what_is_no_policy_or_too_big(tmp_path):
    run, _ = untrained_run(tmp_path / "run", "foraging", net_arch=(256, 256))
    with pytest.raises(UsageError, match="more than 100,000"):
        export(run, tmp_path / "big.npz", max_bytes=100_000)
    assert not (tmp_path / "big.npz").exists() and not list(tmp_path.glob("*.part"))
    with pytest.raises(UsageError, match="neither a run directory"):
        export(tmp_path / "nothing", tmp_path / "x.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(UsageError, match="is not a pretrained policy"):
        pretrained.PretrainedPolicy.read(tmp_path / "junk.npz")


@pytest.mark.parametrize("scenario", ["foraging", "crafting", "team_capture"])
def test_each_shipped_policy_is_small_names_its_run_and_beats_random(scenario):
    path = pretrained.path_of(scenario)
    assert path.exists(), f"no pretrained policy ships for {scenario}"
    assert path.stat().st_size <= 1_000_000
    policy = pretrained.load(f"pretrained:{scenario}")
    assert policy.scenario == scenario and policy.metadata["run"]["sha256"] and policy.metadata["run"]["timesteps"]
    env_id = scenario
    # team capture: as blue against the scripted team (games end in ~300 ticks; against random ~1000)
    opponent = agent_factory("scripted", env_id, 1) if scenario == "team_capture" else None
    episodes = 8
    mine = play(agent_factory("pretrained", env_id, 0), env_id, episodes, 10_000, policy.env_kwargs, opponent)
    theirs = play(agent_factory("random", env_id, 0), env_id, episodes, 10_000, policy.env_kwargs, opponent)
    assert mine["score"].mean() > theirs["score"].mean() + 5, (mine["score"].mean(), theirs["score"].mean())
    if scenario == "team_capture":  # a floor against the scripted team: 2 wins, 5 draws and a return of 0.1
        # measured on these 8 games (14% wins, 63.5% draws on 200); the policy shipped before lost all by ~66
        not_lost = mine["success"].sum() + mine["draw"].sum()
        assert not_lost >= 5 and mine["success"].sum() >= 1 and mine["return"].mean() > -5, (mine["return"], not_lost)


BLOCK_TORCH = """
import sys
class NoTorch:  # as if torch (and SB3, which needs it) were not installed
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "stable_baselines3"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NoTorch())
"""


def test_arena_eval_plays_the_shipped_policy_without_torch(tmp_path):
    code = BLOCK_TORCH + (f"from arena_envs.cli import arena_eval\n"
                          f"status = arena_eval(['pretrained', 'Foraging-v0', '--episodes', '8', '--out', "
                          f"{str(tmp_path)!r}])\n"
                          f"assert 'torch' not in sys.modules and 'stable_baselines3' not in sys.modules\n"
                          f"sys.exit(status)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    table = json.loads((tmp_path / "eval.json").read_text())
    assert table["pretrained"]["score_mean"] > 10 * max(table["random"]["score_mean"], 1.0)


def test_a_model_still_needs_torch_and_says_which_extra(tmp_path):
    """The blocker is real: a trained model's path does load torch, and its absence is one line."""
    run, _ = untrained_run(tmp_path / "run", "foraging")
    code = BLOCK_TORCH + (f"from arena_envs.cli import arena_eval\n"
                          f"sys.exit(arena_eval([{str(run)!r}, 'Foraging-v0', '--episodes', '2']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "is not installed" in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize("name, error", [
    ("pretrained:crafting", "plays Crafting-v0, not Foraging-v0"),
    ("pretrained:foragin", "did you mean 'foraging'"),
    ("missing.npz", "no pretrained policy at missing.npz"),
])
def test_a_wrong_pretrained_name_is_one_line(capsys, name, error):
    status, _, err = run_cli(arena_eval, [name, "Foraging-v0", "--episodes", "1"], capsys)
    assert status == 2 and error in one_line(err)


def test_pretrained_needs_a_scenario_where_none_is_played():
    with pytest.raises(UsageError, match="pretrained:<scenario>"):
        pretrained.load("pretrained")
    assert pretrained.scenario_of("pretrained", "Crafting-v0") == "crafting"
    assert pretrained.scenario_of("pretrained:TeamCapture-v0") == "team_capture"
    assert pretrained.scenario_of("scripted") is None


def test_a_policy_of_another_team_size_is_refused(tmp_path):
    run, _ = untrained_run(tmp_path / "run", "team_capture")
    path = export(run, tmp_path / "tc.npz")
    make = agent_factory(str(path), "team_capture")
    envs = make_native_env("team_capture", 1, agents_per_team=3)
    with pytest.raises(UsageError, match="does not fit this env"):
        make(envs)
    envs.close()


def test_arena_agent_others_plays_a_pretrained_team(tmp_path, capsys):
    """``--others`` with an exported policy: both teams' other agents act by it."""
    from arena_envs.llm.runner import other_teams

    run, _ = untrained_run(tmp_path / "run", "team_capture")
    path = export(run, tmp_path / "tc.npz")
    from arena_envs import team_capture_v0

    env = team_capture_v0.parallel_env(agents_per_team=2)
    observations, _ = env.reset(seed=0)
    actions = {}
    for controller in other_teams(str(path), 0, {"max_calls": 4}):
        actions.update(controller(observations))
    assert sorted(actions) == sorted(env.possible_agents)
    scenario = env.scenario
    for team in ("blue", "red"):  # each team's actions are the policy's on its stacked observations
        members = [a for a in env.possible_agents if a.startswith(team)]
        stacked = {k: np.stack([observations[a][k] for a in members]) for k in observations[members[0]]}
        expected = pretrained.PretrainedAgent(pretrained.load(str(path)), scenario.observation_space,
                                              scenario.action_space, scenario.params, seed=0).act(stacked)
        for i, agent in enumerate(members):
            assert int(actions[agent]["tool"]) == int(expected["tool"][i])
            np.testing.assert_array_equal(actions[agent]["move_to"], expected["move_to"][i])
    env.close()
    status, out, err = run_cli(arena_agent, ["TeamCapture-v0", "--agent", "scripted", "--others", str(path),
                                             "--episodes", "1", "--max-turns", "3", "--quiet",
                                             "--out", str(tmp_path / "agent")], capsys)
    assert status == 0, err
    status, _, err = run_cli(arena_agent, ["TeamCapture-v0", "--agent", "scripted", "--others", "somebody",
                                           "--episodes", "1", "--out", str(tmp_path / "bad")], capsys)
    assert status == 2 and "--others must be scripted, idle or a pretrained policy" in one_line(err)


def test_the_documented_commands_run(tmp_path, capsys, monkeypatch):
    """The block of docs/guide/training.md#shipped-policies, each command at a small scale."""
    import re
    import shlex

    from arena_envs.training.export import main as export_main

    page = (ROOT / "docs" / "guide" / "training.md").read_text()
    block = re.search(r"tested-by: tests/test_pretrained.py::test_the_documented_commands_run -->\n```bash\n(.*?)```",
                      page, re.S)[1]
    lines = [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]
    monkeypatch.chdir(tmp_path)
    untrained_run(tmp_path / "runs" / "foraging", "foraging")
    small = {"--episodes": "1"}
    programs = {"arena-eval": arena_eval, "arena-agent": arena_agent, "arena-view": arena_view}
    for argv in lines:
        argv = [small.get(previous, word) for previous, word in zip(["", *argv[:-1]], argv, strict=True)]
        if argv[0] == "python":
            assert argv[1:3] == ["-m", "arena_envs.training.export"]
            status = export_main(argv[3:])
        else:
            extra = ["--max-turns", "3", "--quiet", "--out", "agent"] if argv[0] == "arena-agent" else []
            status = programs[argv[0]](argv[1:] + extra)
        out, err = capsys.readouterr()
        assert status == 0, (argv, err[-2000:])
    assert pretrained.PretrainedPolicy.read(tmp_path / "foraging.npz").scenario == "foraging"


def test_arena_view_plays_a_pretrained_policy_then_shows_it(tmp_path, capsys):
    status, out, err = run_cli(arena_view, ["--play", "pretrained", "Crafting-v0", "--episodes", "1",
                                            "--export", str(tmp_path / "site")], capsys)
    assert status == 0, err
    assert "(3 episodes)" in out  # the policy's, then the random and scripted baselines'
    index = (tmp_path / "site" / "data" / "index.js").read_text()  # arenaIndex("<the index as JSON>");
    assert '"pretrained"' in json.loads(index.removeprefix("arenaIndex(").rstrip().removesuffix(");"))
    status, _, err = run_cli(arena_view, ["--play", "pretrained:foraging", "Crafting-v0"], capsys)
    assert status == 2 and "plays Foraging-v0, not Crafting-v0" in one_line(err)
