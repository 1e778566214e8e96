"""Headless Debian Chromium driven by Selenium through the system chromedriver.

No browser is downloaded: the paths are Debian's (`apt-get install chromium
chromium-driver`), or SIMPLE_CHROMIUM / SIMPLE_CHROMEDRIVER. Missing ones fail in CI.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from tests.conftest import require_service

T = TypeVar("T")
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
WAIT_S = 90.0


def browser_paths() -> tuple[str, str]:
    chromium = os.environ.get("SIMPLE_CHROMIUM") or shutil.which("chromium") or ""
    driver = os.environ.get("SIMPLE_CHROMEDRIVER") or shutil.which("chromedriver") or ""
    if not (chromium and driver):
        require_service(
            "chromium",
            "install Debian's chromium and chromium-driver (apt-get install -y "
            "chromium chromium-driver)",
        )
    return chromium, driver


def start_chromium(width: int = 1366, height: int = 900) -> Any:
    """A headless Chromium session (selenium WebDriver)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = browser_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


def wait_for(check: Callable[[], T | None], what: str, timeout_s: float = WAIT_S) -> T:
    """Poll `check` (a DOM read in the browser) until it returns something truthy."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as e:  # the DOM moved under us: try again
            last = e
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last error: {last})")


def screenshot(driver: Any, name: str, full_page: bool = True) -> Path:
    """Save a PNG under artifacts/ (CI keeps them); the whole page's height when asked."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    size = driver.get_window_size()
    if full_page:
        height = driver.execute_script(
            "return Math.max(document.documentElement.scrollHeight, document.body.scrollHeight)"
        )
        driver.set_window_size(size["width"], min(max(int(height) + 140, 600), 4000))
    driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(str(path))
    driver.set_window_size(size["width"], size["height"])
    return path


def log_in(driver: Any, base_url: str, token: str, path: str = "/") -> None:
    """Open PATH; the dashboard sends us to the login form; type the token once."""
    from selenium.webdriver.common.by import By

    driver.get(base_url + path)
    if "/login" in driver.current_url:
        field = driver.find_element(By.ID, "token")
        field.send_keys(token)
        field.submit()
        wait_for(lambda: "/login" not in driver.current_url, "the login to land")


def severe_console_errors(driver: Any) -> list[str]:
    """Browser console errors (a CSP violation shows up here)."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
