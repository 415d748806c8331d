"""arena-view and recordings written to attack it: recordings are shared, so one may come from
someone who wants the page to run their script. Each attack is played in Debian's headless
Chromium, on the page served by the real server on 127.0.0.1 and on a static export opened from
disk: no script of the recording's runs (it would set ``window.__pwned`` and the title), and the
page still shows what can be shown."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_helpers import chromium
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from arena_envs.viewer.cli import CONTENT_SECURITY_POLICY, make_server
from arena_envs.viewer.cli import main as arena_view
from arena_envs.viewer.demo import record_foraging
from arena_envs.viewer.episodes import Episodes
from arena_envs.wrappers.record import EPISODES_FILE

PWN = "window.__pwned = 1, document.title = 'pwned'"  # an expression: it runs as one, or as a statement
# HTML wherever the page shows text: a handler to run, a script element, a </script> to leave a
# script the data may be pasted into, and the two line ends older JavaScript ends a string at
HTML_TOKEN = f'<img src=x onerror="{PWN}"></script><script>{PWN}</script>\u2028\u2029'


# -- recordings ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def clean_line(tmp_path_factory) -> bytes:
    """One Foraging episode as the recorder wrote it."""
    folder = tmp_path_factory.mktemp("foraging")
    record_foraging(folder)
    return (folder / EPISODES_FILE).read_bytes().strip()


def world_breakout(line: bytes) -> bytes:
    """The line with its world wrapped in script: not JSON, so its header and summary still list it,
    and a page that runs the line as JavaScript draws the episode after running the script."""
    start, end = line.index(b',"world":') + len(b',"world":'), line.index(b',"ticks":')
    assert start < end < line.rindex(b',"summary":{')
    return line[:start] + f"({PWN}, ".encode() + line[start:end] + b")" + line[end:]


def html_everywhere(line: bytes) -> bytes:
    """Valid JSON with HTML in the message token of tick 0 and in each kind of text the page shows."""
    episode = json.loads(line)
    episode["agent"] = HTML_TOKEN
    episode["ticks"][0]["messages"] = [{"from": 0, "token": HTML_TOKEN, "reached": [0]}]
    episode["ticks"][0]["output"] = HTML_TOKEN
    episode["transcript"] = [{"role": "assistant", "content": HTML_TOKEN,
                              "tool_calls": [{"function": {"name": HTML_TOKEN, "arguments": HTML_TOKEN}}]}]
    return json.dumps(episode).encode()


@pytest.fixture(scope="module")
def recording(clean_line, tmp_path_factory) -> Path:
    """Episode 0 breaks out of a script, episode 1 holds HTML, episode 2 is as recorded."""
    path = tmp_path_factory.mktemp("hostile") / EPISODES_FILE
    path.write_bytes(b"\n".join([world_breakout(clean_line), html_everywhere(clean_line), clean_line]) + b"\n")
    return path


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with chromium(tmp_path_factory.mktemp("chromium")) as driver:
        yield driver


@pytest.fixture(scope="module")
def served(recording) -> Iterator[str]:
    server = make_server(Episodes.load([recording]), port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def exported(recording, tmp_path_factory) -> str:
    site = tmp_path_factory.mktemp("site")
    assert arena_view([str(recording), "--export", str(site)]) == 0
    return (site / "index.html").as_uri()


@pytest.fixture(params=["served", "export"])
def page(request) -> str:
    """The page's URL: served by arena-view, or the export's index.html on disk."""
    return request.getfixturevalue("served" if request.param == "served" else "exported")


# -- in the browser --------------------------------------------------------------------------


def open_episode(browser, page: str, episode: int) -> str:
    """Load ``page`` at ``episode``; returns the title the page gave it once it was handled."""
    browser.get("about:blank")  # a fresh page, so nothing is kept from the last test
    browser.get(f"{page}#episode={episode}&tick=0")
    WebDriverWait(browser, 20).until(lambda d: d.execute_script("return arenaView.view.id") == episode)
    return text_of(browser, "title")


def text_of(browser, element: str) -> str:
    """An element's text exactly (Selenium's ``.text`` folds white space and line separators)."""
    return browser.execute_script("return document.getElementById(arguments[0]).textContent", element)


def settle(browser) -> None:
    """Wait until an image that cannot load has failed, and a little more: by then the image of a
    handler put in the page before it would have failed too, and its handler run."""
    browser.execute_async_script("const done = arguments[arguments.length - 1], probe = new Image();"
                                 "probe.onerror = () => setTimeout(done, 300); probe.src = 'missing.png';")


def assert_nothing_ran(browser) -> None:
    settle(browser)
    assert browser.execute_script("return window.__pwned") is None
    assert browser.title == "arena-view"


def test_a_world_that_breaks_out_of_the_data_script_runs_nothing(browser, page):
    title = open_episode(browser, page, 0)
    assert_nothing_ran(browser)
    assert title.startswith("#0 cannot be shown: episode 0 is not a valid recording line (JSONDecodeError")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#episodes tbody tr")) == 3  # listed from header and summary
    browser.find_element(By.CSS_SELECTOR, "#episodes tbody tr[data-id='2']").click()  # the others still show
    WebDriverWait(browser, 20).until(lambda d: text_of(d, "title").startswith("#2 · foraging"))
    assert browser.execute_script("return arenaView.agentPixels().length") == 1
    assert_nothing_ran(browser)


def test_html_in_a_message_token_shows_as_text_and_runs_nothing(browser, page):
    title = open_episode(browser, page, 1)
    assert_nothing_ran(browser)
    assert title.startswith("#1 · foraging")
    assert HTML_TOKEN in title  # the agent's name, as the recording spells it
    details = text_of(browser, "tick-details")
    assert f"sent token {HTML_TOKEN} to agent" in details and details.count(HTML_TOKEN) == 2  # and the output
    transcript = text_of(browser, "transcript")
    assert transcript.count(HTML_TOKEN) == 3  # content, tool name and arguments
    assert browser.execute_script("return document.querySelectorAll('img, #tick-details script').length") == 0
    assert browser.execute_script("return arenaView.agentPixels().length") == 1  # the world is drawn


def test_the_page_policy_refuses_script_that_gets_into_the_page(browser, page):
    """Should some text one day reach the page as HTML, its handlers and scripts still do not run."""
    open_episode(browser, page, 2)
    browser.execute_script("document.body.insertAdjacentHTML('beforeend', arguments[0]);"
                           "const script = document.createElement('script'); script.textContent = arguments[1];"
                           "document.body.append(script);", f'<img src=x onerror="{PWN}">', PWN)
    assert_nothing_ran(browser)
    assert browser.execute_script("return arenaView.agentPixels().length") == 1


# -- the data the page is given --------------------------------------------------------------


def test_the_served_page_sends_its_policy_as_a_header(served):
    with urllib.request.urlopen(served, timeout=10) as answer:
        policy, page = answer.headers["Content-Security-Policy"], answer.read().decode()
    assert policy == CONTENT_SECURITY_POLICY and "frame-ancestors 'none'" in policy
    meta = page.split('http-equiv="Content-Security-Policy" content="')[1].split('"')[0]  # what an export keeps
    assert policy.startswith(meta) and "script-src 'self';" in meta and "unsafe" not in meta


def test_each_data_script_is_one_call_with_json_in_strings(recording, clean_line):
    episodes = Episodes.load([recording])
    assert len(episodes.lines) == 3
    for number in range(3):
        script = episodes.episode_script(number).decode("ascii")
        assert script.startswith(f"arenaEpisode({number},") and script.endswith(");\n")
        assert not set("<>&\u2028\u2029") & set(script)
        arguments = json.loads(f"[{script[len(f'arenaEpisode({number},'):-3]}]")
        if number == 0:
            assert arguments[0] is None and arguments[1].startswith("episode 0 is not a valid recording line")
        else:
            assert json.loads(arguments[0]) == json.loads(html_everywhere(clean_line) if number == 1 else clean_line)
    index = episodes.index_script().decode("ascii")
    assert index.startswith('arenaIndex("') and "<" not in index
    assert [e["agent"] for e in json.loads(json.loads(index[len("arenaIndex("):-3]))][1] == HTML_TOKEN


def test_numbers_json_parse_cannot_read_are_written_as_null(tmp_path):
    line = b'{"format":"arena-episode/1","scenario":"foraging","world":{},"ticks":[{"t":0,"r":NaN},' \
           b'{"t":1,"r":-Infinity},{"t":2,"r":1e999}],"summary":{"return":NaN}}'
    (tmp_path / EPISODES_FILE).write_bytes(line + b"\n")
    episodes = Episodes.load([tmp_path])
    assert episodes.index[0]["return"] is None
    script = episodes.episode_script(0).decode("ascii")
    assert [t["r"] for t in json.loads(json.loads(script[len("arenaEpisode(0,"):-3]))["ticks"]] == [None] * 3


def test_deeply_nested_json_is_a_line_that_cannot_be_shown(tmp_path):
    line = b'{"format":"arena-episode/1","world":{},"ticks":' + b"[" * 100_000 + b"]" * 100_000 + b',"summary":{}}'
    (tmp_path / EPISODES_FILE).write_bytes(line + b"\n")
    script = Episodes.load([tmp_path]).episode_script(0).decode("ascii")
    assert script.startswith('arenaEpisode(0,null,"episode 0 is not a valid recording line (RecursionError')
