"""``arena-serve export SCENARIO DIR``: an OpenEnv environment package serving one scenario.

The package is thin: ``server/app.py`` runs ``arena-serve SCENARIO`` (the same app, guard and
batched sessions), and the arena-envs wheel it depends on travels inside it (``wheels/``),
since arena-envs is on no package index. What ``openenv validate DIR`` and ``openenv push``
read is there: ``openenv.yaml`` (with its ``validation:`` block), ``pyproject.toml`` with a
``server`` script and its ``uv.lock``, ``server/app.py`` with ``main()``, and
``server/Dockerfile``.

    arena-serve export foraging openenv-foraging
    openenv validate openenv-foraging
    openenv push openenv-foraging --repo-id YOUR_NAME/arena-foraging
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path

import arena_envs

from .sessions import SCENARIOS

# What each scenario's reward can be per step, for openenv.yaml's reward declaration
REWARD_RANGES = {"foraging": (-5.0, 10.0), "crafting": (-5.0, 10.0), "treasure_hunt": (-0.01, 1.0),
                 "team_capture": (-200.0, 200.0)}

OPENENV_YAML = """\
spec_version: 1
name: arena-{name}
version: {version}
type: space
runtime: fastapi
port: 8000
description: "arena-envs {scenario}: one world of one batched numpy core per WebSocket session"
validation:
  reward:
    range: [{low}, {high}]
    oracle_tolerance: 0.0
    floor_margin: 0.1
  resources:
    cpu: 1.0
    memory_mb: 2048
    disk_mb: 2048
    episode_timeout_s: 600.0
  capabilities:
    verifier:
      kind: reward_channel
  types:
    tags: [arena-envs, {scenario}]
"""

PYPROJECT = """\
[build-system]
requires = ["setuptools>=64", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "openenv-arena-{name}"
version = "{version}"
description = "arena-envs {scenario} served over OpenEnv (exported by arena-serve export)"
requires-python = ">=3.10"
dependencies = ["arena-envs[serve]=={version}", "openenv>=0.10"]

[project.scripts]
server = "server.app:main"

[tool.setuptools]
packages = ["server"]

[tool.uv.sources]
arena-envs = {{ path = "wheels/{wheel}" }}
"""

APP = '''\
"""OpenEnv server of arena-envs' {scenario} scenario (written by ``arena-serve export``).

    server --port 8000                       # the [project.scripts] entry point
    python -m server.app --host 0.0.0.0      # the same; any arena-serve option is accepted

It is ``arena-serve {scenario}`` with this package's settings; ``ARENA_API_KEY`` in the
environment (a Space secret) makes every route ask for that key.
"""

from __future__ import annotations

import os
import sys

from arena_envs.serve.cli import main as arena_serve

SCENARIO = {scenario!r}
SETTINGS = {settings!r}  # arena-serve options fixed at export


def main(argv: list[str] | None = None) -> int:
    # a Hugging Face Space is reached by its own name (SPACE_HOST) through the Space's proxy:
    # arena-serve answers only the names it is told of
    space = ["--allowed-hosts", os.environ["SPACE_HOST"]] if os.environ.get("SPACE_HOST") else []
    return arena_serve([SCENARIO, *SETTINGS, *space, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
'''

CLIENT = '''\
"""The client of this environment: OpenEnv's own, since actions and observations are plain JSON.

    from client import ArenaClient

    with ArenaClient(base_url="http://127.0.0.1:8000").sync() as env:
        result = env.reset(seed=7)
        result = env.step({{"tool": "idle", "params": {{}}}})
"""

from openenv.core import GenericEnvClient as ArenaClient

__all__ = ["ArenaClient"]
'''

DOCKERFILE = """\
FROM python:3.11-slim
WORKDIR /app/env
COPY . /app/env
# exactly what uv.lock resolved, arena-envs from the wheel beside it (no torch: the base install)
RUN pip install --no-cache-dir uv && uv sync --frozen --no-cache \\
    && useradd --create-home arena && chown -R arena /app/env
ENV PATH="/app/env/.venv/bin:$PATH"
USER arena
EXPOSE 8000
CMD ["server", "--host", "0.0.0.0", "--port", "8000"]
"""

README = """\
# arena-{name}

arena-envs' `{scenario}` scenario as an OpenEnv environment: one world of one batched numpy
core per WebSocket session, OpenEnv's `GenericEnvClient` unchanged. Exported by
`arena-serve export {scenario} DIR` from arena-envs {version}.

- run here: `uv sync --frozen && .venv/bin/server --port 8000`
- check: `openenv validate .`
- publish to a Hugging Face Space: `openenv push . --repo-id YOUR_NAME/arena-{name}`
  (then set the Space secret `ARENA_API_KEY` to require a key)
"""


def source_root() -> Path | None:
    """The checkout arena_envs was installed from (editable install), if it was."""
    root = Path(arena_envs.__file__).resolve().parents[1]
    return root if (root / "setup.cfg").is_file() and (root / "arena_envs").is_dir() else None


def arena_wheel(into: Path, wheel: Path | None) -> Path:
    """The arena-envs wheel the package depends on: the one given, else built from the checkout."""
    into.mkdir(parents=True, exist_ok=True)
    if wheel is not None:
        return Path(shutil.copy2(wheel, into / wheel.name))
    root = source_root()
    if root is None:
        raise ValueError("arena_envs is not installed from a checkout: pass --wheel PATH to an arena-envs wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(into), str(root)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise ValueError(f"building the arena-envs wheel failed: {done.stderr.strip()[-2000:]}")
    return max(into.glob("arena_envs-*.whl"), key=lambda p: p.stat().st_mtime)


def lock(directory: Path) -> None:
    """``uv lock`` in the package, so that its image installs exactly what was resolved."""
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if not Path(uv).exists() and shutil.which(uv) is None:
        raise ValueError("uv is needed to write uv.lock: pip install uv (or pass --no-lock and run `uv lock` later)")
    done = subprocess.run([uv, "lock", "--quiet"], cwd=directory, capture_output=True, text=True)
    if done.returncode != 0:
        raise ValueError(f"uv lock failed: {done.stderr.strip()[-2000:]}")


def check_settings(scenario: str, settings: list[str]) -> None:
    """Build the app the package will serve, so that a bad setting is refused now, not at start-up."""
    from .app import make_app

    kwargs, it = {}, iter(settings)
    max_sessions = 64
    for flag in it:
        value = next(it)
        if flag == "--max-sessions":
            max_sessions = int(value)
        else:
            key, sep, text = value.partition("=")
            if not sep or not key:
                raise ValueError(f"--env-kwarg: expected NAME=VALUE, got {value!r}")
            try:
                kwargs[key] = json.loads(text)
            except ValueError:
                kwargs[key] = text
    try:
        app = make_app(scenario, max_sessions=max_sessions, **kwargs)
    except TypeError as err:
        raise ValueError(str(err)) from err
    asyncio.run(app.state.hub.aclose())


def export(scenario: str, directory: Path, *, settings: list[str] = (), wheel: Path | None = None,
           write_lock: bool = True) -> Path:
    """Write the OpenEnv package of ``scenario`` into ``directory`` (which must be new or empty)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}: one of {', '.join(SCENARIOS)}")
    if wheel is not None and (not wheel.is_file() or wheel.suffix != ".whl"):
        raise ValueError(f"--wheel: no wheel file at {wheel}")
    if directory.exists() and any(directory.iterdir()):
        raise ValueError(f"{directory} is not empty: export into a new directory")
    check_settings(scenario, settings)
    wheel_path = arena_wheel(directory / "wheels", wheel)
    low, high = REWARD_RANGES[scenario]
    fields = dict(scenario=scenario, name=scenario.replace("_", "-"), version=arena_envs.__version__,
                  wheel=wheel_path.name, low=low, high=high, settings=list(settings))
    (directory / "server").mkdir()
    for path, template in (("openenv.yaml", OPENENV_YAML), ("pyproject.toml", PYPROJECT), ("README.md", README),
                           ("server/app.py", APP), ("server/Dockerfile", DOCKERFILE),
                           ("client.py", CLIENT)):
        (directory / path).write_text(template.format(**fields))
    for package in (directory, directory / "server"):  # what `openenv push` looks for
        (package / "__init__.py").write_text("")
    (directory / ".dockerignore").write_text(".venv\n__pycache__\n")
    if write_lock:
        lock(directory)
    return directory


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="arena-serve export", description="Write an OpenEnv environment package "
                                "(openenv.yaml, pyproject.toml + uv.lock, server/app.py, server/Dockerfile) "
                                "that serves one scenario with arena-serve.")
    p.add_argument("scenario", help=f"one of: {', '.join(SCENARIOS)}")
    p.add_argument("directory", type=Path, help="where to write the package (new or empty)")
    p.add_argument("--max-sessions", type=int, default=64, help="concurrent sessions the server admits")
    p.add_argument("--env-kwarg", action="append", default=[], metavar="NAME=VALUE",
                   help="argument for the scenario's env, fixed in the package (as arena-serve takes it); repeatable")
    p.add_argument("--wheel", type=Path, help="the arena-envs wheel to ship (default: built from this checkout)")
    p.add_argument("--no-lock", action="store_true", help="skip `uv lock` (openenv validate wants uv.lock)")
    args = p.parse_args(argv)
    settings = ["--max-sessions", str(args.max_sessions)]
    for setting in args.env_kwarg:
        settings += ["--env-kwarg", setting]
    try:
        out = export(args.scenario, args.directory, settings=settings, wheel=args.wheel, write_lock=not args.no_lock)
    except ValueError as err:
        print(f"arena-serve export: {err}", file=sys.stderr)
        return 2
    print(f"wrote {out}: check it with `openenv validate {out}`, publish it with `openenv push {out}`")
    return 0
