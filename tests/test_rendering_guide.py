"""Every code block of docs/guide/rendering.md runs as written (Python blocks in a fresh interpreter,
commands through their console scripts), in order, in one scratch directory; then arena-view serves
what they recorded, started as its console script."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guide" / "rendering.md"
BIN = Path(sys.executable).parent


def blocks() -> list[tuple[str, str]]:
    return re.findall(r"```(python|bash)\n(.*?)```", GUIDE.read_text(), re.S)


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> Path:
    """The scratch directory after every block of the guide ran in it."""
    cwd = tmp_path_factory.mktemp("guide")
    env = {**os.environ, "SDL_VIDEODRIVER": "dummy"}  # the "human" window, off screen
    for language, code in blocks():
        if language == "python":
            done = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                                  timeout=300)
            assert done.returncode == 0, done.stderr
            continue
        for line in filter(None, code.splitlines()):
            name, *args = line.split()
            done = subprocess.run([str(BIN / name), *args, *(["--quiet"] if name == "arena-agent" else [])],
                                  cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, f"{line}\n{done.stderr}"
    return cwd


def test_the_guide_shows_each_kind_of_block():
    kinds = [language for language, _ in blocks()]
    assert kinds.count("python") == 2 and kinds.count("bash") == 2


def test_the_guide_commands_record_and_export(ran):
    from arena_envs.wrappers.record import read_episodes

    episodes = read_episodes(ran / "runs" / "rec" / "episodes.jsonl")
    sources = [e["source"] for e in episodes]
    assert sources.count("RecordEpisodes") == 8 and sources.count("arena-eval") == 8
    assert len(read_episodes(ran / "runs" / "agent" / "episodes.jsonl")) == 2
    assert (ran / "runs" / "site" / "index.html").is_file()
    assert len(list((ran / "runs" / "site" / "data").glob("episode-*.js"))) == 16


def test_arena_view_serves_on_127_0_0_1_as_a_console_script(ran):
    server = subprocess.Popen([str(BIN / "arena-view"), "runs/rec", "runs/agent", "--port", "0"], cwd=ran,
                              stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line)[0]
        assert "18 episodes" in line
        with urllib.request.urlopen(url + "data/index.js", timeout=10) as answer:
            assert answer.read().startswith(b'arenaIndex("[')
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert b"viewer.js" in answer.read()
    finally:
        server.terminate()
        server.wait(timeout=10)
