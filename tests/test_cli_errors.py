"""A user's mistake in any CLI is one line naming the fix and exit status 2; arena-train's overrides,
``--capture-video`` and its log before any episode has ended."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cli_helpers import one_line, run_cli
from PIL import Image

from arena_envs import cli

ROOT = Path(__file__).resolve().parents[1]


# -- missing extras ---------------------------------------------------------------------------------


def test_a_module_missing_at_import_names_its_extra():
    """``arena-train`` without torch (blocked before anything imports it): the console script's
    function imports the command itself, so the import error becomes the one line. (``arena-eval``
    of a baseline or a shipped policy needs no torch: tests/test_pretrained.py.)"""
    code = ("import sys; sys.modules['torch'] = None\n"
            "from arena_envs.cli import arena_train\n"
            "sys.exit(arena_train(['Foraging-v0', '--timesteps', '1']))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 2
    assert one_line(done.stderr) == ("arena-train: error: torch is not installed (the 'train' extra): "
                                     "pip install -e '.[train]' in the arena-envs checkout")


def test_a_module_missing_at_run_time_names_the_commands_own_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # tqdm is in 'train' and 'llm': arena-agent's is 'llm'
    status, _, err = run_cli(cli.arena_agent, ["TreasureHunt-v0", "--agent", "scripted", "--episodes", "1",
                                               "--out", str(tmp_path)], capsys)
    assert status == 2
    assert one_line(err).endswith("tqdm is not installed (the 'llm' extra): pip install -e '.[llm]' in the "
                                  "arena-envs checkout")


def test_a_missing_module_that_no_extra_installs_keeps_its_traceback():
    def broken(argv):
        import no_such_module_anywhere  # noqa: F401  (a bug, not a missing extra)

    with pytest.raises(ModuleNotFoundError):
        cli.run("arena-x", broken, [])


# -- bad scenario arguments -------------------------------------------------------------------------

BAD_ARGUMENTS = [
    (cli.arena_agent, ["TreasureHunt-v0", "--agent", "scripted", "--env-arg", "difficulty=impossible"],
     "TreasureHunt-v0 does not take difficulty='impossible': unknown difficulty 'impossible'; "
     "choose one of ['easy', 'hard', 'medium']"),
    (cli.arena_serve, ["treasure_hunt", "--env-kwarg", "difficulty=impossible"],
     "unknown difficulty 'impossible'; choose one of ['easy', 'hard', 'medium']"),
    (cli.arena_train, ["Foraging-v0", "--set", "env_kwargs.layout=nowhere", "--print-config"],
     "Foraging-v0 does not take layout='nowhere': layout must be one of ('random', 'classic'), got 'nowhere'"),
    (cli.arena_eval, ["scripted", "Crafting-v0", "--env-arg", "layout=nowhere"],
     "Crafting-v0 does not take layout='nowhere'"),
    (cli.rllib_ppo, ["TeamCapture-v0", "--env-config", '{"agents_per_team": 99}'],
     "TeamCapture-v0 does not take agents_per_team=99"),
    (cli.arena_agent, ["Foraging-v0", "--agent", "scripted", "--env-arg", "max_tick=5"],
     "unknown Foraging-v0 argument 'max_tick'; did you mean 'max_ticks'? (known: render_mode, half_size,"),
    (cli.arena_agent, ["team_capture", "--agent", "scripted", "--env-arg", "agents_per_teem=3"],
     "unknown TeamCapture-v0 argument 'agents_per_teem'; did you mean 'agents_per_team'? (known: render_mode, "
     "agents_per_team, max_cycles,"),
    (cli.arena_agent, ["treasure_hunt", "--agent", "scripted", "--env-arg", "dificulty=hard"],
     "unknown TreasureHunt-v0 argument 'dificulty'; did you mean 'difficulty'? (known: difficulty, backend,"),
]


@pytest.mark.parametrize(("command", "argv", "message"), BAD_ARGUMENTS)
def test_a_bad_scenario_argument_is_one_line_with_the_valid_values(command, argv, message, tmp_path, capsys,
                                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)  # whatever a command would write goes there
    status, _, err = run_cli(command, argv, capsys)
    assert status == 2 and message in one_line(err)


# -- arena-train's overrides -------------------------------------------------------------------------


def printed_config(argv, capsys, tmp_path) -> dict:
    status, out, err = run_cli(cli.arena_train, [*argv, "--print-config", "--out", str(tmp_path)], capsys)
    assert status == 0, err
    return yaml.safe_load(out)


def test_set_reads_each_value_as_yaml(tmp_path, capsys):
    config = printed_config(["foraging", "--set", "ppo.learning_rate=1e-3", "--set", "policy_kwargs.net_arch=[32, 32]",
                             "--set", "env_kwargs.layout=classic", "--set", "normalize_reward=false"], capsys, tmp_path)
    assert config["ppo"]["learning_rate"] == 0.001 and isinstance(config["ppo"]["learning_rate"], float)
    assert config["policy_kwargs"]["net_arch"] == [32, 32]
    assert config["env_kwargs"]["layout"] == "classic" and config["normalize_reward"] is False


def test_cleanrl_flags_set_their_keys(tmp_path, capsys):
    config = printed_config(["TeamCapture-v0", "--total-timesteps", "1000", "--num-envs", "8", "--seed", "3",
                             "--learning-rate", "0.01", "--num-steps", "16", "--ent-coef", "0.02", "--gamma", "0.9"],
                            capsys, tmp_path)
    assert (config["timesteps"], config["n_envs"], config["seed"]) == (1000, 8, 3)
    assert config["ppo"] | {"learning_rate": 0.01, "n_steps": 16, "ent_coef": 0.02, "gamma": 0.9} == config["ppo"]
    assert config["env_id"] == "arena_envs/TeamCapture-v0"


@pytest.mark.parametrize(("argv", "message"), [
    (["--set", "ppo.learnin_rate=1e-3"], "unknown config key 'ppo.learnin_rate'; did you mean 'ppo.learning_rate'?"),
    (["--set", "n_env=8"], "unknown config key 'n_env'; did you mean 'n_envs'?"),
    (["--set", "ppo.learning_rate"], "--set needs KEY=VALUE (e.g. ppo.learning_rate=1e-3)"),
    (["--algo", "sb3-ppo", "--set", "ppo.anneal_lr=true"], "unknown config key 'ppo.anneal_lr'"),  # the lean PPO's
    (["--config", "foraging_large_batc"], "did you mean 'foraging_large_batch'?"),
])
def test_a_bad_override_is_one_line_with_a_suggestion(argv, message, tmp_path, capsys):
    status, _, err = run_cli(cli.arena_train, ["Foraging-v0", *argv, "--print-config", "--out", str(tmp_path)], capsys)
    assert status == 2 and message in one_line(err)


# -- training output, --capture-video, threads, models that do not fit -------------------------------

TINY = ["--num-envs", "2", "--total-timesteps", "64", "--num-steps", "16", "--set", "ppo.batch_size=32",
        "--no-progress"]


def gif_frames(path: Path) -> int:
    with Image.open(path) as image:
        return image.n_frames


def test_lean_ppo_before_any_episode_ends_says_so_and_captures_a_video(tmp_path, capsys):
    # one update of 16 ticks per world (the league's learner plays blue: 2 agents x 2 worlds x 16 = 64
    # agent steps, each decision one tick), episodes of 40 ticks: none ends, so there is no score to show
    out = tmp_path / "tc"
    status, printed, err = run_cli(cli.arena_train, ["TeamCapture-v0", *TINY, "--capture-video", "--out", str(out),
                                                     "--set", "eval_every=0", "--set", "env_kwargs.max_cycles=40",
                                                     "--set", "league.action_repeat=1"],
                                   capsys)
    assert status == 0, err
    assert "no episode finished yet" in printed and "score" not in printed
    with (out / "progress.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert rows and all(r["rollout/score_mean"] == "" and r["rollout/score_episodes"] == "" for r in rows)
    [gif] = (out / "videos").glob("rollout_*_steps.gif")
    assert gif.name == "rollout_64_steps.gif" and gif_frames(gif) == 21  # the first frame, then every other tick
    assert (out / "videos" / "rollout_64_steps.jsonl").read_text().count("\n") == 40


def test_sb3_counts_the_episodes_behind_its_score_and_runs_torch_on_one_thread(tmp_path, capsys):
    out = tmp_path / "sb3"
    argv = ["Foraging-v0", "--algo", "sb3-ppo", *TINY, "--set", "ppo.batch_size=16", "--set", "env_kwargs.max_ticks=10",
            "--capture-video", "--set", "checkpoint_every=32", "--out", str(out)]
    status, printed, err = run_cli(cli.arena_train, argv, capsys)
    assert status == 0, err
    assert "over the last 6 episodes" in printed  # 64 steps of 2 worlds: 32 ticks each, 3 episodes of 10
    assert yaml.safe_load((out / "speed.json").read_text())["torch_threads"] == 1
    with (out / "progress.csv").open() as fh:
        counted = [r["rollout/score_episodes"] for r in csv.DictReader(fh) if r.get("rollout/score_mean")]
    assert counted and all(int(float(n)) > 0 for n in counted)
    assert sorted(p.name for p in (out / "videos").glob("*.gif")) == ["rollout_32_steps.gif", "rollout_64_steps.gif"]


def test_a_model_evaluated_on_another_env_or_encoding_is_one_line(tmp_path, capsys):
    runs = {name: tmp_path / name for name in ("eight", "four")}
    for name, directions in (("eight", 8), ("four", 4)):
        assert cli.arena_train(["Foraging-v0", *TINY, "--set", f"encoding.directions={directions}",
                                "--out", str(runs[name])]) == 0
    capsys.readouterr()
    status, _, err = run_cli(cli.arena_eval, [str(runs["eight"]), "Crafting-v0", "--episodes", "1"], capsys)
    assert status == 2
    assert f"{runs['eight']} was trained on Foraging-v0, not Crafting-v0: arena-eval {runs['eight']} " \
           "Foraging-v0" in one_line(err)
    (runs["eight"] / "model.zip").replace(runs["four"] / "model.zip")  # a model beside another run's config
    status, _, err = run_cli(cli.arena_eval, [str(runs["four"]), "Foraging-v0", "--episodes", "1"], capsys)
    assert status == 2 and "model.zip does not fit this env" in one_line(err)
