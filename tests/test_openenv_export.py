"""``arena-serve export``: an OpenEnv package that OpenEnv's own validator accepts, and that serves
from the environment its ``uv.lock`` installs (what its Dockerfile does)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import pytest
from openenv.cli._cli_utils import validate_env_structure
from openenv.cli._validation import validate_multi_mode_deployment
from openenv.core import GenericEnvClient
from process_helpers import free_port, serving, wait_until_answered

from arena_envs.serve.cli import main as arena_serve

BIN = Path(sys.executable).parent


def run(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=cwd, capture_output=True, text=True, timeout=600)



def test_the_export_passes_openenv_validate_and_serves(tmp_path):
    package = tmp_path / "openenv-foraging"
    done = run("arena-serve", "export", "foraging", str(package), "--env-kwarg", "layout=classic")
    assert done.returncode == 0, done.stderr
    for name in ("openenv.yaml", "pyproject.toml", "uv.lock", "server/app.py", "server/Dockerfile", "client.py"):
        assert (package / name).is_file(), name
    assert len(list((package / "wheels").glob("arena_envs-*.whl"))) == 1

    # OpenEnv's validator, as a user runs it: the static level passes; the default level adds
    # runtime checks that need a Docker build (SKIP here), so its verdict is WARN with exit 0
    static = run("openenv", "validate", str(package), "--level", "static")
    assert static.returncode == 0 and "Verdict: PASS" in static.stdout, static.stdout + static.stderr
    full = run("openenv", "validate", str(package))
    assert full.returncode == 0, full.stdout + full.stderr
    assert "PASS  static.manifest" in full.stdout and " FAIL " not in full.stdout and "ERROR" not in full.stdout
    # the deployment checks OpenEnv's older validator and `openenv push` make
    assert validate_multi_mode_deployment(package) == (True, [])
    validate_env_structure(package)

    # what its Dockerfile does, without Docker: the locked install, then the `server` script
    synced = subprocess.run([str(BIN / "uv"), "sync", "--frozen", "--quiet"], cwd=package, capture_output=True,
                            text=True, timeout=600)
    assert synced.returncode == 0, synced.stderr[-3000:]
    port = free_port()
    with serving([str(package / ".venv" / "bin" / "server"), "--port", str(port)], f"http://127.0.0.1:{port}/health",
                 cwd=str(package)):
        with GenericEnvClient(base_url=f"http://127.0.0.1:{port}").sync() as env:
            result = env.reset(seed=0)
            assert "Berry1" in result.observation["text"]  # the classic layout fixed at export
            result = env.step({"tool": "collect", "params": {"target_name": "Berry1"}})
            assert result.observation["observation"]["last_action_result"] is not None


def test_export_refuses_bad_input_in_one_line(tmp_path, capsys):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    for argv, says in ((["nowhere_scenario", str(tmp_path / "a")], "unknown scenario"),
                       (["foraging", str(tmp_path / "full")], "not empty"),
                       (["foraging", str(tmp_path / "b"), "--env-kwarg", "novalue"], "NAME=VALUE"),
                       (["foraging", str(tmp_path / "c"), "--env-kwarg", "flavour=1"], "flavour"),
                       (["foraging", str(tmp_path / "d"), "--wheel", str(tmp_path / "none.whl")], "no wheel")):
        assert arena_serve(["export", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1 and err.startswith("arena-serve export: "), (argv, err)
    assert not any((tmp_path / name).exists() for name in "abcd")  # nothing written


SCENARIOS = ("foraging", "crafting", "treasure_hunt", "team_capture")


@contextlib.contextmanager
def package_server(package: Path):
    """The package's own entry point (``server/app.py`` ``main``), run by this interpreter on a free port."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "server.app", "--port", str(port), "--log-level", "warning"],
                              cwd=package, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_answered(server, url + "/health")
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.timeout(1800)  # a few minutes alone: four packages, each validated three ways
def test_every_exported_package_passes_each_level_of_openenv_validate_this_machine_runs(tmp_path):
    """Static on each package; the package levels that build its image SKIP here (no Docker daemon); the
    runtime checks against each package's own server running (``openenv validate URL``) pass. OpenEnv's
    CLI runs in this process (its start-up is seconds of imports)."""
    from openenv.cli.__main__ import app as openenv_cli
    from typer.testing import CliRunner

    def validate(*argv: str) -> str:
        result = CliRunner().invoke(openenv_cli, ["validate", *argv])
        assert result.exit_code == 0, (argv, result.output)
        return result.output

    wheel = None
    for scenario in SCENARIOS:
        package = tmp_path / scenario
        assert arena_serve(["export", scenario, str(package), "--no-lock",
                            *(["--wheel", str(wheel)] if wheel else [])]) == 0
        wheel = wheel or next((package / "wheels").glob("arena_envs-*.whl"))
        assert "Verdict: PASS" in validate(str(package), "--level", "static"), scenario
        full = validate(str(package))
        assert "PASS  static.manifest" in full and " FAIL " not in full and "SKIP" in full, (scenario, full)
        with package_server(package) as url:
            assert "Verdict: PASS" in validate(url), scenario


def test_team_capture_package_passes_what_we_check_instead_of_a_multi_agent_profile(tmp_path):
    """OpenEnv's validator has no multi-agent profile (it lists multi-agent scenes as unsupported): through
    the exported package's server, each of the session's agents is seen and obeyed, the other team is
    not the session's to command, both teams move in every step, and the reward is the margin's change."""
    from arena_envs.serve.rubrics import scenario_rubric

    package = tmp_path / "team"
    assert arena_serve(["export", "team_capture", str(package), "--no-lock"]) == 0
    rubric = scenario_rubric("team_capture")
    with package_server(package) as url, GenericEnvClient(base_url=url).sync() as env:
        first = env.reset(seed=3).observation
        blue = ["blue_agent_1", "blue_agent_2"]
        assert sorted(first["observation"]) == blue  # one observation per agent of the team
        orders = {"blue_agent_1": [-15, 0, -15], "blue_agent_2": [15, 0, -15]}
        result = env.step({"calls": {name: {"tool": "move_to", "params": {"target": target}}
                                     for name, target in orders.items()}})
        assert all(result.observation["observation"][name]["last_action_result"]["success"] for name in blue)
        rubric.reset()
        margin = rubric(None, result.observation)
        total = result.reward
        for _ in range(120):  # both teams act every tick: the scripted red team captures too
            result = env.step({"calls": {}})
            total += result.reward
            margin += rubric(None, result.observation)
        info = result.observation["info"]
        assert info["blue_points"] >= 1 and info["red_points"] >= 1
        assert total == pytest.approx(info["blue_score"] - info["red_score"]) == pytest.approx(margin)
        with pytest.raises(RuntimeError, match="not on this team"):
            env.step({"calls": {"red_agent_1": {"tool": "idle"}}})
