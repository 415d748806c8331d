"""``make demo`` run as the Makefile runs it (its recipe's command, the same arguments) in a
temporary folder, and what it leaves there: PPO's table against the baselines, a Team Capture
match as a GIF and as a replay page that headless Chromium opens from disk, and the
``arena-view`` command it prints. ``make bench`` is the full ``arena-bench``."""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import requests
from browser_helpers import agents_drawn, canvas_pixels, chromium, drawn_colour, scrub_to
from PIL import Image
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TEAM_COLOURS = ([40, 90, 220], [220, 50, 50])  # blue, red: as the page draws them


def last_command(target: str) -> list[str]:
    """The command that ``make TARGET`` runs last (its own recipe's, after any prerequisite's)."""
    # under `make test` this make is a sub-make, which would print "Entering/Leaving directory" lines
    outside = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    recipe = subprocess.run(["make", "--no-print-directory", "-n", target], cwd=ROOT, capture_output=True,
                            text=True, check=True, env=outside).stdout
    return shlex.split(recipe.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> SimpleNamespace:
    """``make demo``'s command, run from a fresh folder (where it writes runs/demo)."""
    command = last_command("demo")
    assert Path(command[0]).name == "python" and command[1:3] == ["-m", "arena_envs.demo"], command
    folder = tmp_path_factory.mktemp("demo")
    done = subprocess.run([sys.executable, *command[1:]], cwd=folder, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    match = folder / "runs" / "demo" / "team_capture"
    (recording,) = (match / "episodes.jsonl").read_text().splitlines()  # one match, recorded once
    ticks = [json.loads(line) for line in (match / "match.jsonl").read_text().splitlines()]
    return SimpleNamespace(folder=folder, stdout=done.stdout, run=folder / "runs" / "demo" / "ppo", match=match,
                           recording=json.loads(recording), ticks=ticks)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with chromium(tmp_path_factory.mktemp("chromium")) as driver:
        yield driver


def test_make_demo_trains_ppo_past_random_to_the_scripted_forager_and_says_where_to_look(demo):
    rows = json.loads((demo.run / "eval.json").read_text())
    ppo, random, scripted = (rows[name]["score_mean"] for name in ("ppo", "random", "scripted"))
    assert ppo > random + 50 and ppo >= 0.9 * scripted, rows  # it learned (98 against 95.7 and 3.2 at seed 0)
    assert (demo.run / "learning_curve.png").stat().st_size > 10_000
    assert "| ppo " in (demo.run / "eval.md").read_text()
    for shown in ("runs/demo/ppo/eval.md", "runs/demo/ppo/learning_curve.png", "runs/demo/team_capture/match.gif",
                  "runs/demo/team_capture/site/index.html"):
        assert f"  {shown}  " in demo.stdout and (demo.folder / shown).is_file(), shown
    assert "  arena-view runs/demo/team_capture  " in demo.stdout
    assert "arena-bench" not in demo.stdout  # the bench is make bench's


def test_the_gif_and_the_replay_page_show_the_same_match(demo):
    """The GIF's match (drawn by arena-eval's rollout, logged tick by tick in match.jsonl) is the
    recorded one: as long, every agent's reward the same at every tick, the same final score."""
    header, summary = demo.recording, demo.recording["summary"]
    assert (header["scenario"], header["seed"], header["agent"]) == ("team_capture", 10_000, "pretrained vs scripted")
    assert len(demo.ticks) == summary["length"] == len(header["ticks"]) - 1  # (the recording's tick 0: the reset)
    rewards = [[round(r, 3) for r in t["reward"]] for t in demo.ticks]
    assert rewards == [t["r"] for t in header["ticks"][1:]] and demo.ticks[-1]["info"]["score"] == summary["score"]
    gif = Image.open(demo.match / "match.gif")
    assert gif.n_frames == 1 + math.ceil(summary["length"] / 2)  # the first tick, then every second and the last
    first = gif.convert("RGB").tobytes()
    gif.seek(gif.n_frames - 1)
    assert gif.convert("RGB").tobytes() != first


def test_the_demo_replay_page_draws_the_match_from_disk_and_scrubs(demo, browser):
    browser.get((demo.match / "site" / "index.html").as_uri())
    WebDriverWait(browser, 20).until(lambda d: d.execute_script("return arenaView.view.id") == 0)
    assert browser.execute_script("return arenaView.view.index.length") == 1
    assert "pretrained vs scripted" in browser.find_element(By.ID, "title").text
    teams = demo.recording["world"]["teams"]
    start = agents_drawn(browser)
    assert [drawn_colour(browser, *xy) for xy in start] == [TEAM_COLOURS[t] for t in teams]
    before, last = canvas_pixels(browser), int(browser.find_element(By.ID, "scrubber").get_attribute("max"))
    assert last == demo.recording["summary"]["length"]
    scrub_to(browser, last // 2)
    assert agents_drawn(browser) != start and canvas_pixels(browser) != before
    assert f"({last // 2}/{last})" in browser.find_element(By.ID, "tick-label").text
    scrub_to(browser, last)
    final = demo.ticks[-1]["info"]
    assert f"blue {final['blue_score']:g} · red {final['red_score']:g}" in browser.find_element(By.ID, "status").text


def test_arena_view_serves_the_demo_match_as_the_demo_prints_it(demo):
    """``arena-view runs/demo/team_capture`` (README's and the demo's last lines), on a free port."""
    assert "arena-view runs/demo/team_capture" in (ROOT / "README.md").read_text()
    server = subprocess.Popen([str(BIN / "arena-view"), "runs/demo/team_capture", "--port", "0"], cwd=demo.folder,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = server.stdout.readline()
        assert "1 episodes at http://127.0.0.1:" in first, first + server.stderr.read()
        url = first.split(" at ")[1].split()[0]
        assert "pretrained vs scripted" in requests.get(url + "data/index.js", timeout=10).text
        episode = requests.get(url + "data/episode-0.js", timeout=10).text
        assert json.loads(json.loads(episode.removeprefix("arenaEpisode(0,").rstrip().removesuffix(");"))) == \
            demo.recording  # the episode as JSON in a string
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_make_bench_is_the_full_arena_bench():
    """Every section (no --only), with the system packages its sandbox rows need."""
    assert [Path(word).name for word in last_command("bench")] == ["arena-bench"]
    assert "dpkg -s" in subprocess.run(["make", "-n", "bench"], cwd=ROOT, capture_output=True, text=True).stdout
