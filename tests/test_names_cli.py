"""Every CLI x every spelling of every scenario name: the same scenario, or one line and exit 2.

The table of cases below is also what ``python tests/test_names_cli.py`` prints as Markdown
(each CLI x spelling -> result), from the same real runs. Valid spellings take each CLI's
cheapest real path (``arena-train --print-config``, a one-episode ``arena-eval`` and
``arena-agent``, ``arena-bench --only`` once per scenario with all its spellings, and for
``arena-serve`` and RLlib a scenario argument they reject, whose message names the scenario
the spelling resolved to); unknown names must give exit status 2 and one line on stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from cli_helpers import one_line, run_cli

import arena_envs  # noqa: F401  (registers the envs)
from arena_envs import cli
from arena_envs.names import SCENARIOS, UnknownNameError, find, resolve

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def spellings(key: str) -> list[str]:
    """The documented spellings of a scenario, plus one in capitals (names are case-insensitive)."""
    scenario = SCENARIOS[key]
    return [*scenario.spellings(), scenario.short_id.upper()]


ALL = [(key, name) for key in SCENARIOS for name in spellings(key)]
UNKNOWN = [("Foragin-v0", "Foraging-v0"), ("arena_envs/TeamCaptur-v0", "arena_envs/TeamCapture-v0"),
           ("crafting_v1", None), ("CartPole-v1", None)]
SHORT_EPISODE = {"foraging": "max_ticks=5", "crafting": "max_ticks=5", "team_capture": "max_ticks=5"}


# -- the resolver itself ---------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "name"), ALL)
def test_every_spelling_resolves_to_its_scenario(key, name):
    assert resolve(name).key == key
    assert resolve(name).env_id == SCENARIOS[key].env_id
    assert gym.spec(SCENARIOS[key].env_id) is not None  # the id it resolves to is registered


@pytest.mark.parametrize(("name", "suggested"), UNKNOWN)
def test_an_unknown_name_is_one_line_with_the_closest_spelling(name, suggested):
    with pytest.raises(UnknownNameError) as error:
        resolve(name)
    message = str(error.value)
    assert "\n" not in message and f"unknown environment {name!r}" in message
    if suggested:
        assert f"did you mean {suggested!r}?" in message  # in the style it was written in
    assert find(name) is None


def test_a_scenario_a_command_does_not_take_is_named_with_the_ones_it_does():
    with pytest.raises(UnknownNameError, match="TreasureHunt-v0 is not available here .choose one of Foraging-v0"):
        resolve("treasure_hunt", among=["foraging", "crafting"])


def test_gym_make_of_team_capture_says_what_to_use_instead():
    with pytest.raises(ValueError) as error:
        gym.make("arena_envs/TeamCapture-v0")
    message = str(error.value)
    assert "\n" not in message
    assert "team_capture_v0.parallel_env()" in message and "gym.make_vec('arena_envs/TeamCapture-v0'" in message
    assert gym.make_vec("arena_envs/TeamCapture-v0", num_envs=2).num_envs == 2  # what it points to works


def test_a_bad_scenario_argument_in_gym_make_lists_the_valid_values():
    valid = r"unknown difficulty 'impossible'; choose one of \['easy', 'hard', 'medium'\]"
    with pytest.raises(ValueError, match=valid):
        gym.make("arena_envs/TreasureHunt-v0", difficulty="impossible")
    with pytest.raises(ValueError, match=r"layout must be one of \('random', 'classic'\)"):
        gym.make("arena_envs/Foraging-v0", layout="nowhere")


# -- each CLI x each spelling ----------------------------------------------------------------------


def train_case(key, name, tmp_path, capsys):
    status, out, err = run_cli(cli.arena_train, [name, "--print-config", "--out", str(tmp_path)], capsys)
    if SCENARIOS[key].text:
        assert status == 2 and "arena-agent TreasureHunt-v0" in one_line(err)
        return "exit 2: a text env, use arena-agent"
    assert status == 0, err
    assert f"env_id: {SCENARIOS[key].env_id}" in out
    return f"config of {SCENARIOS[key].short_id}"


def eval_case(key, name, tmp_path, capsys):
    argv = ["scripted", name, "--episodes", "1", "--out", str(tmp_path)]
    status, out, err = run_cli(cli.arena_eval, [*argv, "--env-arg", SHORT_EPISODE.get(key, "x=1")], capsys)
    if SCENARIOS[key].text:
        assert status == 2 and "arena-agent TreasureHunt-v0" in one_line(err)
        return "exit 2: a text env, use arena-agent"
    assert status == 0, err
    assert out.startswith(SCENARIOS[key].env_id)  # the table's title
    return f"1 episode on {SCENARIOS[key].short_id}"


def agent_case(key, name, tmp_path, capsys):
    short = {"foraging": "max_ticks=5", "crafting": "max_ticks=5", "team_capture": "max_cycles=5",
             "treasure_hunt": "max_steps=3"}[key]
    argv = [name, "--agent", "scripted", "--episodes", "1", "--quiet", "--out", str(tmp_path), "--env-arg", short]
    status, out, err = run_cli(cli.arena_agent, argv, capsys)
    assert status == 0, err
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["env_id"] == SCENARIOS[key].env_id and results["episodes"] == 1
    return f"1 episode on {SCENARIOS[key].short_id}"


def serve_case(key, name, tmp_path, capsys):
    # the name resolves first, then the session cap is checked: that error means the name was taken
    status, _, err = run_cli(cli.arena_serve, [name, "--max-sessions", "0"], capsys)
    assert status == 2 and "max_sessions must be at least 1" in one_line(err)
    return f"accepted as {SCENARIOS[key].key} (stopped at --max-sessions 0)"


def rllib_case(key, name, tmp_path, capsys):
    status, _, err = run_cli(cli.rllib_ppo, [name, "--env-config", '{"no_such_argument": 1}'], capsys)
    line = one_line(err)
    assert status == 2
    if SCENARIOS[key].text:
        assert "TreasureHunt-v0 is not available here" in line
        return "exit 2: no RLlib env (choose Foraging, Crafting, TeamCapture)"
    assert f"unknown {SCENARIOS[key].short_id} argument 'no_such_argument'" in line  # resolved before Ray starts
    return f"resolved to {SCENARIOS[key].short_id} (stopped at a bad --env-config)"


CLI_CASES = {"arena-train": train_case, "arena-eval": eval_case, "arena-agent": agent_case,
             "arena-serve": serve_case, "rllib_ppo": rllib_case}
COMMANDS = {"arena-train": cli.arena_train, "arena-eval": cli.arena_eval, "arena-agent": cli.arena_agent,
            "arena-serve": cli.arena_serve, "arena-bench": cli.arena_bench, "rllib_ppo": cli.rllib_ppo}


@pytest.mark.parametrize("command", list(CLI_CASES))
@pytest.mark.parametrize(("key", "name"), ALL)
def test_every_cli_takes_every_spelling(command, key, name, tmp_path, capsys):
    CLI_CASES[command](key, name, tmp_path, capsys)


def bench_case(key, capsys):
    """One ``arena-bench --only`` with every spelling of the scenario: its section runs once."""
    status, out, err = run_cli(cli.arena_bench, ["--only", *spellings(key), "--seconds", "0.01"], capsys)
    assert status == 0, err
    rows = [line for line in out.splitlines() if line.startswith("| ") and "| row " not in line]
    assert rows and len(rows) == len({line.split("|")[1] for line in rows})  # no row twice
    return f"its section once ({len(rows)} rows)"


@pytest.mark.parametrize("key", list(SCENARIOS))
def test_arena_bench_only_takes_every_spelling_of_a_scenario(key, capsys):
    bench_case(key, capsys)


def unknown_case(command, name, capsys, argv_for):
    status, _, err = run_cli(COMMANDS[command], argv_for(command, name), capsys)
    line = one_line(err)
    assert status == 2 and line.startswith(f"{command}: error: unknown ")
    assert name in line
    return "exit 2: " + line.split(": error: ", 1)[1]


def unknown_argv(command: str, name: str) -> list[str]:
    return {"arena-eval": ["scripted", name], "arena-bench": ["--only", name]}.get(command, [name])


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize(("name", "suggested"), UNKNOWN)
def test_every_cli_refuses_an_unknown_name_in_one_line(command, name, suggested, capsys):
    unknown_case(command, name, capsys, unknown_argv)


def test_a_config_given_as_the_scenario_says_how_to_use_it(capsys):
    status, _, err = run_cli(cli.arena_train, ["foraging_large_batch"], capsys)
    assert status == 2
    assert "'foraging_large_batch' is a config, not a scenario: arena-train Foraging-v0 --config " \
           "foraging_large_batch" in one_line(err)


def test_arena_train_lists_scenarios_and_configs_apart(capsys):
    status, out, _ = run_cli(cli.arena_train, ["--list"], capsys)
    scenarios, configs = out.split("other configs")
    assert status == 0
    assert "TeamCapture-v0" in scenarios and "ppo/team_capture (--algo ppo)" in scenarios
    assert "TreasureHunt-v0  none: a text env" in scenarios
    assert "foraging_large_batch" in configs and "foraging_large_batch" not in scenarios


@pytest.mark.parametrize("script", ["arena-train", "arena-eval", "arena-agent", "arena-serve", "arena-bench",
                                    "rllib_ppo"])
def test_the_console_scripts_print_one_line_and_exit_2_for_an_unknown_name(script):
    """The installed console scripts (and ``python -m`` for RLlib's): no traceback reaches the user."""
    argv = ([sys.executable, "-m", "arena_envs.training.rllib_ppo"] if script == "rllib_ppo"
            else [str(BIN / script)]) + unknown_argv(script, "Foragin-v0")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 2, done.stderr
    line = one_line(done.stderr)
    assert line.startswith(f"{script}: error: unknown ") and "did you mean" in line


def test_arena_serve_serves_a_scenario_named_by_its_gymnasium_id(tmp_path):
    """The real console script and server: ``arena-serve arena_envs/TeamCapture-v0`` serves team capture."""
    import signal
    import time

    import requests

    port = 19000 + os.getpid() % 1000
    process = subprocess.Popen([str(BIN / "arena-serve"), "arena_envs/TeamCapture-v0", "--port", str(port),
                                "--max-sessions", "1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                metadata = requests.get(f"http://127.0.0.1:{port}/metadata", timeout=5)
                break
            except requests.ConnectionError:
                assert process.poll() is None and time.monotonic() < deadline, "arena-serve did not start"
                time.sleep(0.3)
        assert metadata.ok and metadata.json()["name"] == "arena_envs/team_capture"
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)
    finally:
        process.kill()


# -- the table for the closing note --------------------------------------------------------------------


def table(tmp: Path) -> str:
    """Every CLI x spelling -> what happened, as a Markdown table (run: python tests/test_names_cli.py)."""

    class Capture:  # capsys for a run outside pytest
        def readouterr(self):
            out, err = sys.stdout.getvalue(), sys.stderr.getvalue()
            sys.stdout.seek(0), sys.stdout.truncate(), sys.stderr.seek(0), sys.stderr.truncate()
            return out, err

    import io

    real = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
    capture, rows = Capture(), []
    try:
        for i, (key, name) in enumerate(ALL):
            cells = [CLI_CASES[c](key, name, tmp / f"{c}{i}", capture) for c in CLI_CASES]
            rows.append([name, *cells])
        benches = {key: bench_case(key, capture) for key in SCENARIOS}
        for row, (key, _) in zip(rows, ALL, strict=True):
            row.insert(5, benches[key])
        for name, _ in UNKNOWN:
            rows.append([name, *(unknown_case(c, name, capture, unknown_argv) for c in COMMANDS)])
    finally:
        sys.stdout, sys.stderr = real
    header = ["spelling", *CLI_CASES, "arena-bench --only"]
    header = [*header[:5], header[6], header[5]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(f"`{row[0]}`" if j == 0 else row[j] for j in range(len(row))) + " |" for row in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        print(table(Path(folder)))
