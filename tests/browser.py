"""Headless Chromium (Debian's ``chromium`` + ``chromium-driver``) driven by Selenium, for tests that look.

Nothing is downloaded: the browser and its driver are the system's. Without them a test skips,
except under CI (env ``CI`` set), where it fails, naming the packages to install.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from tests.conftest import ROOT

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SCREENSHOTS = ROOT / "test-artifacts"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1600",
)


@contextmanager
def chromium() -> Iterator[WebDriver]:
    """A headless Chromium with a fresh profile, closed on exit (a test using it is marked ``browser``:
    :mod:`tests.tiers` checks the browser, its driver and Selenium are there before the run)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must never fetch a browser or driver
    options = Options()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        options.add_argument(f"--user-data-dir={profile}")
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        try:
            driver.set_page_load_timeout(60)
            yield driver
        finally:
            driver.quit()


def page_text(driver: WebDriver) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.TAG_NAME, "body").text)


def wait_for_text(driver: WebDriver, *needles: str, timeout_s: float = 30) -> str:
    """Wait until every needle is visible on the page; return the page's text."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    def shown(d: WebDriver) -> bool:
        text = page_text(d)
        return all(n in text for n in needles)

    try:
        WebDriverWait(driver, timeout_s, poll_frequency=0.2).until(shown)
    except TimeoutException:
        raise AssertionError(f"never shown: {needles!r}; the page says:\n{page_text(driver)[:2000]}") from None
    return page_text(driver)


def wait_until(driver: WebDriver, condition: Callable[[WebDriver], object], timeout_s: float = 30) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, timeout_s, poll_frequency=0.2).until(condition)


def screenshot(driver: WebDriver, name: str) -> Path:
    """Keep a screenshot under ``test-artifacts/`` at the repository root."""
    SCREENSHOTS.mkdir(exist_ok=True)
    path = SCREENSHOTS / name
    driver.save_screenshot(str(path))
    return path
