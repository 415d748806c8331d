"""The package as an index would get it: ``python -m build``, ``twine check``, and the wheel in a clean venv.

The clean venv gets the base install only (gymnasium, pettingzoo, numpy: no torch), from
the wheel with ``constraints.txt``, and runs the ``arena-bench`` console script there; then
``pip install -e '.[llm]'`` (the docs' install from the checkout) gives it ``arena-agent``.
"""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(argv: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(map(str, argv))}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--outdir", out, ROOT])
    return out


def test_build_makes_an_sdist_and_a_wheel_that_twine_accepts(dist):
    wheel, sdist = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    assert [p.name for p in wheel] == ["arena_envs-0.1.0-py3-none-any.whl"] and len(sdist) == 1
    checked = run([BIN / "twine", "check", "--strict", *wheel, *sdist])
    assert checked.stdout.count("PASSED") == 2, checked.stdout
    names = subprocess.run([sys.executable, "-m", "zipfile", "-l", wheel[0]], capture_output=True, text=True).stdout
    for member in ("arena_envs/wrappers/sb3.py", "arena_envs/training/configs/foraging.yaml", "arena_envs/py.typed",
                   "arena_envs/serve/export.py", "arena_envs/pretrained/foraging.npz",
                   "arena_envs/pretrained/crafting.npz", "arena_envs/pretrained/team_capture.npz"):
        assert member in names, member


def test_the_wheel_installs_in_a_clean_venv_and_runs_arena_bench(dist, tmp_path):
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    pip = [env / "bin" / "python", "-m", "pip", "--disable-pip-version-check"]
    run([*pip, "install", "--quiet", "-c", ROOT / "constraints.txt", *dist.glob("*.whl")])
    installed = run([*pip, "list", "--format=freeze"]).stdout.lower()
    assert "arena-envs==0.1.0" in installed and "torch" not in installed  # the base install needs no torch
    bench = run([env / "bin" / "arena-bench", "--only", "foraging", "--seconds", "1"], cwd=tmp_path)
    assert "Foraging native batch B=4096" in bench.stdout and "env-steps/s" in bench.stdout
    # from the checkout with the llm extra, as the docs say: arena-agent then plays a scripted episode
    run([*pip, "install", "--quiet", "-c", ROOT / "constraints.txt", "-e", f"{ROOT}[llm]"], cwd=tmp_path)
    agent = run([env / "bin" / "arena-agent", "arena_envs/TreasureHunt-v0", "--agent", "scripted", "--episodes", "1",
                 "--out", tmp_path / "hunt", "--quiet"], cwd=tmp_path)
    assert (tmp_path / "hunt" / "results.json").is_file(), agent.stdout
