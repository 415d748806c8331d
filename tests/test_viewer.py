"""arena-view in a real browser: Debian's headless Chromium driven by Selenium through the system
chromedriver (no browser download). The page is served by the real server on 127.0.0.1 and
loaded for a Foraging rollout, a team-capture match and a Treasure Hunt LLM transcript."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from browser_helpers import CHROMEDRIVER, CHROMIUM, agents_drawn, canvas_pixels, chromium, drawn_colour, scrub_to
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

import arena_envs  # noqa: F401  (registers the environments)
from arena_envs.viewer.cli import main as arena_view
from arena_envs.viewer.cli import make_server
from arena_envs.viewer.demo import record_demo
from arena_envs.viewer.episodes import Episodes
from arena_envs.wrappers.record import EPISODES_FILE

# where the screenshots go: docs/images with ARENA_VIEW_SCREENSHOTS=docs/images (how the docs' ones
# were made), else a temporary directory, so that a test run leaves the checkout as it was
SCREENSHOTS = os.environ.get("ARENA_VIEW_SCREENSHOTS")


# -- recordings ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recordings(tmp_path_factory) -> Path:
    return record_demo(tmp_path_factory.mktemp("recordings"))


@pytest.fixture(scope="module")
def served(recordings):
    server = make_server(Episodes.load([recordings]), port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    return Path(SCREENSHOTS) if SCREENSHOTS else tmp_path_factory.mktemp("screenshots")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with chromium(tmp_path_factory.mktemp("chromium")) as driver:
        yield driver


# -- helpers ---------------------------------------------------------------------------------


def open_episode(browser, url: str, scenario: str, agent: str | None = None) -> int:
    """Load the page, pick the first episode of ``scenario`` (played by ``agent``) in the list; returns its id."""
    browser.get(url)
    WebDriverWait(browser, 20).until(lambda d: d.execute_script("return arenaView.view.index.length") > 0)
    Select(browser.find_element(By.ID, "f-scenario")).select_by_value(scenario)
    rows = browser.find_elements(By.CSS_SELECTOR, "#episodes tbody tr")
    row = next(r for r in rows if agent is None or agent in r.text)
    row.click()
    episode = int(row.get_attribute("data-id"))
    WebDriverWait(browser, 20).until(lambda d: d.execute_script("return arenaView.view.id") == episode)
    return episode


# -- the three kinds of episode --------------------------------------------------------------


def test_a_foraging_rollout_draws_and_scrubbing_moves_the_agent(browser, served, images):
    open_episode(browser, served, "foraging")
    assert browser.find_element(By.ID, "canvas-box").is_displayed()
    (start,) = agents_drawn(browser)
    assert drawn_colour(browser, *start) == [40, 90, 220]  # the agent's blue, where the page says it is
    before = canvas_pixels(browser)
    last = int(browser.find_element(By.ID, "scrubber").get_attribute("max"))
    scrub_to(browser, last // 2)
    (middle,) = agents_drawn(browser)
    assert middle != start and drawn_colour(browser, *middle) == [40, 90, 220]
    assert canvas_pixels(browser) != before
    assert f"({last // 2}/{last})" in browser.find_element(By.ID, "tick-label").text
    legend = browser.find_element(By.ID, "legend").text
    assert "agent" in legend and "berry" in legend and "tree" in legend
    assert "score" in browser.find_element(By.ID, "status").text
    assert "move_to" in browser.find_element(By.ID, "tick-details").text
    browser.find_element(By.ID, "zoom-in").click()  # zoom keeps the agent under its drawn position
    (zoomed,) = agents_drawn(browser)
    assert zoomed != middle and drawn_colour(browser, *zoomed) == [40, 90, 220]
    browser.find_element(By.ID, "zoom-fit").click()
    browser.find_element(By.ID, "play").click()  # playback moves on by itself
    WebDriverWait(browser, 20).until(
        lambda d: int(d.find_element(By.ID, "scrubber").get_attribute("value")) > last // 2 + 2)
    browser.find_element(By.ID, "play").click()
    assert browser.find_element(By.ID, "play").text == "play"
    scrub_to(browser, 60)
    assert browser.save_screenshot(str(images / "arena_view_foraging.png"))


def test_a_team_capture_match_shows_both_teams_points_and_message_bubbles(browser, served, images):
    open_episode(browser, served, "team_capture")
    scrub_to(browser, 0)
    start = agents_drawn(browser)
    assert len(start) == 6
    colours = [drawn_colour(browser, *xy) for xy in start]
    assert colours[:3] == [[40, 90, 220]] * 3 and colours[3:] == [[220, 50, 50]] * 3
    scrub_to(browser, 45)
    assert agents_drawn(browser) != start
    assert "blue" in browser.find_element(By.ID, "status").text and "red" in browser.find_element(By.ID, "status").text
    assert "point" in browser.find_element(By.ID, "legend").text
    ticks = browser.execute_script("return arenaView.view.episode.ticks.map(t => (t.messages || []).length)")
    message_tick = next(i for i, n in enumerate(ticks) if n and i > 30)
    scrub_to(browser, message_tick)
    assert "sent" in browser.find_element(By.ID, "tick-details").text  # the message in the tick's details
    assert browser.save_screenshot(str(images / "arena_view_team_capture.png"))


def test_a_treasure_hunt_transcript_turn_click_moves_to_its_tick(browser, served, images):
    open_episode(browser, served, "treasure_hunt")
    assert browser.find_element(By.ID, "text-world").is_displayed()
    assert browser.find_element(By.ID, "transcript-pane").is_displayed()
    turns = browser.find_elements(By.CSS_SELECTOR, ".turn.assistant")
    assert len(turns) >= 3
    target = turns[2]
    index = int(target.get_attribute("data-index"))
    target.click()
    tick = int(browser.find_element(By.ID, "scrubber").get_attribute("value"))
    recorded = browser.execute_script("return arenaView.view.episode.ticks.map(t => t.turn)")
    assert recorded[tick] == index and recorded.index(index) == tick  # the first tick that turn caused
    assert "current" in target.get_attribute("class")
    assert "(read)" in browser.find_element(By.ID, "text-world").text
    scrub_to(browser, 1)  # scrubbing back highlights the turn behind tick 1
    current = browser.find_element(By.CSS_SELECTOR, ".turn.current")
    assert int(current.get_attribute("data-index")) == recorded[1] != index
    assert browser.save_screenshot(str(images / "arena_view_treasure_hunt.png"))


def test_a_team_capture_chat_agent_transcript_beside_the_shared_world(browser, served):
    """arena-agent --record of a match with a chat agent on each side: one episode per chat agent."""
    open_episode(browser, served, "team_capture", agent="red_agent_1")
    assert "red_agent_1" in browser.find_element(By.ID, "title").text
    assert browser.find_element(By.ID, "transcript-pane").is_displayed()
    assert len(agents_drawn(browser)) == 4  # both teams of the 2 v 2 match
    turns = browser.find_elements(By.CSS_SELECTOR, ".turn.assistant")
    target = turns[5]
    target.click()
    tick = int(browser.find_element(By.ID, "scrubber").get_attribute("value"))
    assert browser.execute_script("return arenaView.view.episode.ticks.map(t => t.turn)")[tick] == \
        int(target.get_attribute("data-index"))
    assert tick == 6 and "current" in target.get_attribute("class")  # one tick per reply of this agent
    assert "red_agent_1" in browser.find_element(By.ID, "tick-details").text


def test_the_list_filters_by_scenario_seed_success_score_and_error(browser, served):
    browser.get(served)
    WebDriverWait(browser, 20).until(lambda d: d.execute_script("return arenaView.view.index.length") == 6)

    def shown() -> int:
        return len(browser.find_elements(By.CSS_SELECTOR, "#episodes tbody tr"))

    assert shown() == 6
    Select(browser.find_element(By.ID, "f-scenario")).select_by_value("treasure_hunt")
    assert shown() == 2
    browser.find_element(By.ID, "f-seed").send_keys("1")
    assert shown() == 1
    browser.find_element(By.ID, "f-seed").clear()
    Select(browser.find_element(By.ID, "f-scenario")).select_by_value("")
    Select(browser.find_element(By.ID, "f-success")).select_by_value("true")
    won = browser.execute_script("return arenaView.view.index.filter(e => e.success).length")
    # the scripted forager and both hunts win; in each match one side may win
    assert shown() == won and 3 <= won <= 5
    Select(browser.find_element(By.ID, "f-success")).select_by_value("")
    browser.find_element(By.ID, "f-score").send_keys("1000")
    assert shown() == 0
    assert [o.get_attribute("value") for o in Select(browser.find_element(By.ID, "f-error")).options] == ["", "none"]


# -- the static export and a file of 1,000 episodes ------------------------------------------


def test_export_writes_a_site_that_works_from_disk(browser, recordings, tmp_path):
    assert arena_view([str(recordings / "foraging"), "--export", str(tmp_path / "site")]) == 0
    browser.get((tmp_path / "site" / "index.html").as_uri())
    WebDriverWait(browser, 20).until(lambda d: d.execute_script("return arenaView.view.id") == 0)
    assert len(agents_drawn(browser)) == 1 and "berry" in browser.find_element(By.ID, "legend").text


def test_arena_view_says_what_is_wrong_with_a_path(tmp_path, capsys):
    assert arena_view([str(tmp_path / "nothing")]) == 2
    (tmp_path / "empty.jsonl").write_text('{"not": "a recording"}\n')
    assert arena_view([str(tmp_path / "empty.jsonl")]) == 2
    assert "no recorded episodes" in capsys.readouterr().err


def test_page_load_time_for_a_file_of_1000_episodes(browser, recordings, tmp_path):
    line = (recordings / "foraging" / EPISODES_FILE).read_bytes().strip()
    (tmp_path / EPISODES_FILE).write_bytes((line + b"\n") * 1000)  # 1,000 full 170-tick Foraging episodes
    started = time.perf_counter()
    episodes = Episodes.load([tmp_path])
    server = make_server(episodes, port=0)
    indexed = time.perf_counter() - started
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        started = time.perf_counter()
        browser.get(f"http://127.0.0.1:{server.server_port}/")
        WebDriverWait(browser, 60).until(lambda d: d.execute_script(
            "return arenaView.view.id === 0 && document.querySelectorAll('#episodes tbody tr').length === 1000"))
        loaded = time.perf_counter() - started
    finally:
        server.shutdown()
        server.server_close()
    size = (tmp_path / EPISODES_FILE).stat().st_size
    print(f"\n1,000 episodes ({size / 1e6:.1f} MB): arena-view reads them in {indexed:.2f} s; "
          f"the page lists them and draws the first in {loaded:.2f} s")
    assert len(episodes.index) == 1000


def test_the_browser_is_debians():
    assert shutil.which("chromium") == CHROMIUM and Path(CHROMEDRIVER).exists()


def test_the_list_reads_header_and_summary_as_a_full_parse_does(recordings):
    import json

    from arena_envs.viewer.episodes import outline, recording_files

    lines = [line for f in recording_files(recordings) if f.name == EPISODES_FILE
             for line in f.read_bytes().splitlines()]
    assert len(lines) == 6
    for line in lines:
        whole, quick = json.loads(line), outline(line)
        assert {k: v for k, v in quick.items() if k != "ticks"} == {k: v for k, v in whole.items()
                                                                    if k not in ("world", "ticks")}
    assert outline(b'{"messages": []}') is None and outline(lines[0][:100]) is None
