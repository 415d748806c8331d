"""A real browser for tests: Debian's headless Chromium through the system chromedriver (no download),
and what the tests read from an ``arena-view`` page in it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@contextmanager
def chromium(profile: Path) -> Iterator[webdriver.Chrome]:
    """Headless Chromium with its profile in ``profile``, quit after the block."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1400,1000", f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


# -- an arena-view page ------------------------------------------------------------------------


def canvas_pixels(browser: webdriver.Chrome) -> str:
    return browser.execute_script("return document.getElementById('world').toDataURL()")


def scrub_to(browser: webdriver.Chrome, tick: int) -> None:
    """Move the timeline as a user does: the range input's value, then its input event."""
    browser.execute_script("const s = document.getElementById('scrubber'); s.value = arguments[0];"
                           "s.dispatchEvent(new Event('input'));", tick)


def agents_drawn(browser: webdriver.Chrome) -> list[list[int]]:
    return browser.execute_script("return arenaView.agentPixels()")


def drawn_colour(browser: webdriver.Chrome, x: int, y: int) -> list[int]:
    return browser.execute_script("return Array.from(document.getElementById('world').getContext('2d')"
                                  ".getImageData(arguments[0], arguments[1], 1, 1).data).slice(0, 3)", x, y)
