"""``arena-serve export``: an OpenEnv package that OpenEnv's own validator accepts, and that serves
from the environment its ``uv.lock`` installs (what its Dockerfile does)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from openenv.cli._cli_utils import validate_env_structure
from openenv.cli._validation import validate_multi_mode_deployment
from openenv.core import GenericEnvClient
from process_helpers import free_port

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
    server = subprocess.Popen([str(package / ".venv" / "bin" / "server"), "--port", str(port)], cwd=package,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None, server.stderr.read()
                assert time.monotonic() < deadline, "the exported server did not start"
                time.sleep(0.3)
        with GenericEnvClient(base_url=f"http://127.0.0.1:{port}").sync() as env:
            result = env.reset(seed=0)
            assert "Berry1" in result.observation["text"]  # the classic layout fixed at export
            result = env.step({"tool": "collect", "params": {"target_name": "Berry1"}})
            assert result.observation["observation"]["last_action_result"] is not None
    finally:
        server.terminate()
        server.wait(timeout=30)


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
