"""The documentation site builds with warnings as errors, and shows the notebooks executed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from browser_helpers import chromium

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def sphinx_build(out: Path) -> subprocess.CompletedProcess:
    """The build of the docs site, as docs/about_these_docs.md shows it (console script of the venv)."""
    script = Path(sys.executable).with_name("sphinx-build")
    return subprocess.run([str(script), "-W", "--keep-going", "-b", "html", "docs", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("docs") / "html"
    done = sphinx_build(out)
    assert done.returncode == 0 and "WARNING" not in done.stderr, done.stderr[-4000:]
    assert "build succeeded" in done.stdout
    return out


def test_docs_site_builds_without_a_warning(site):
    for page in ("index", "api", "results", "speed", "quickstart/rl", "quickstart/multi_agent", "quickstart/llm",
                 "environments/foraging", "environments/crafting", "environments/team_capture",
                 "environments/treasure_hunt"):
        assert (site / f"{page}.html").is_file(), page
    # every guide page is picked up by the glob, and each environment page is its docstring
    for guide in DOCS.glob("guide/*.md"):
        assert (site / "guide" / f"{guide.stem}.html").is_file(), guide.name
    foraging = (site / "environments" / "foraging.html").read_text()
    assert "Observation space" in foraging and "foraging.gif" in foraging
    for notebook in DOCS.glob("notebooks/*.ipynb"):
        assert (site / "notebooks" / f"{notebook.stem}.html").is_file(), notebook.name


def test_the_site_shows_each_notebook_executed_with_the_code_of_its_source():
    """docs/notebooks/ holds executed copies of notebooks/ (docs/execute_notebooks.py): the same
    code cells, with outputs; a notebook edited without re-running the script fails here."""
    sources = sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert sources and sorted(p.name for p in DOCS.glob("notebooks/*.ipynb")) == [p.name for p in sources]
    for source in sources:
        executed = nbformat.read(DOCS / "notebooks" / source.name, as_version=4)
        original = nbformat.read(source, as_version=4)
        code = [c.source for c in original.cells if c.cell_type == "code"]
        assert [c.source for c in executed.cells if c.cell_type == "code"] == code, \
            f"{source.name} changed: run python docs/execute_notebooks.py"
        outputs = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs]
        assert outputs and not any(o.output_type == "error" for o in outputs), source.name


def test_the_rendering_guide_embeds_a_working_arena_view(site, tmp_path):
    """The guide's page, served on 127.0.0.1 and opened in Chromium: the embedded arena-view lists the
    demo's episodes and draws the first one's world."""
    import threading
    from functools import partial
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with chromium(tmp_path / "profile") as browser:
            browser.get(f"http://127.0.0.1:{server.server_port}/guide/rendering.html")
            browser.switch_to.frame(browser.find_element(By.CSS_SELECTOR, "iframe[title=arena-view]"))
            WebDriverWait(browser, 30).until(lambda d: d.execute_script(
                "return window.arenaView && arenaView.view.id === 0"))
            assert len(browser.find_elements(By.CSS_SELECTOR, "#episodes tbody tr")) == 6
            assert browser.execute_script("return arenaView.agentPixels().length") == 1  # the Foraging agent
            assert "berry" in browser.find_element(By.ID, "legend").text
    finally:
        server.shutdown()
        server.server_close()
