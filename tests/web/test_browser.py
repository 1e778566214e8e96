"""The dashboard in a real headless Chromium (Debian's), driven by Selenium, against a
served controller with API tokens: every test logs in through the form first.

Screenshots go to artifacts/ (the runs list, a live run, a finished report, a sandbox's
logs). In CI a missing browser fails; elsewhere it skips.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.ci.conftest import Served, ServeFactory
from tests.web.browser import log_in, screenshot, severe_console_errors, start_chromium, wait_for
from tests.web.conftest import XSS

pytestmark = [pytest.mark.browser, pytest.mark.once, pytest.mark.slow]


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    driver = start_chromium()
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser(chromium: Any) -> Any:
    chromium.delete_all_cookies()
    return chromium


def _by_css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def _row_states(driver: Any) -> list[str]:
    return list(
        driver.execute_script(
            "return Array.from(document.querySelectorAll('#sandboxes tbody tr'))"
            ".map(r => r.cells[1].textContent.trim())"
        )
    )


def test_start_the_quick_suite_from_new_and_watch_it_finish(browser: Any, served: Served) -> None:
    log_in(browser, served.url, served.token, "/new")
    assert browser.execute_script("return document.cookie") == "", "the session is HttpOnly"
    _by_css(browser, 'input[name="suites"][value="quick"]')[0].click()
    _by_css(browser, "#parallel")[0].send_keys("3")  # in waves: the page shows mixed states
    _by_css(browser, "#plan-button")[0].click()
    wait_for(lambda: not _by_css(browser, "#plan")[0].get_attribute("hidden"), "the plan")
    selected = browser.execute_script(
        "return document.querySelectorAll('#plan-selected li').length"
    )
    assert selected == 7
    assert browser.find_element("id", "plan-parallel").text == "3"
    assert browser.find_element("id", "plan-cost").text.startswith("$")
    screenshot(browser, "dashboard-new-plan")
    _by_css(browser, "#start-button")[0].click()
    wait_for(lambda: "/runs/run-" in browser.current_url, "the run page")
    run_id = browser.current_url.rsplit("/", 1)[1]
    browser.execute_script("window.__sameDocument = true")  # gone if the page reloads
    wait_for(lambda: "running" in _row_states(browser), "a running sandbox", 60)
    wait_for(lambda: {"running", "succeeded"} <= set(_row_states(browser)), "waves", 60)
    screenshot(browser, "dashboard-run-live")
    wait_for(lambda: _row_states(browser) == ["succeeded"] * 7, "every row succeeded", 120)
    wait_for(lambda: _by_css(browser, "#report-totals"), "the report", 30)
    assert browser.execute_script("return window.__sameDocument") is True, "no reload"
    with served.client() as http:
        report = http.get(f"/v1/runs/{run_id}/report").json()
    shown = {
        dd.get_attribute("data-total"): dd.text for dd in _by_css(browser, "#report-totals dd")
    }
    totals = report["totals"]
    assert shown["succeeded"] == f"{totals['succeeded']}/{totals['sandboxes']}" == "7/7"
    assert shown["cost_usd"] == f"${totals['cost_usd']:,.2f}"
    assert shown["tokens_used"] == f"{totals['tokens_used']:,}"
    assert shown["llm_calls"] == f"{totals['llm_calls']:,}"
    assert shown["mechanism_coverage_pct"] == f"{totals['mechanism_coverage_pct']}%"
    assert browser.find_element("id", "t-succeeded").text == "7"
    assert browser.find_element("id", "run-status").text == "succeeded"
    assert not browser.find_element("id", "downloads").get_attribute("hidden")
    screenshot(browser, "dashboard-run-report")
    browser.set_window_size(420, 900)  # a phone's width: still readable, nothing cut off
    wide = browser.execute_script("return document.documentElement.scrollWidth")
    assert wide <= 440, f"the page scrolls sideways at 420 px: {wide} px wide"
    screenshot(browser, "dashboard-run-narrow", full_page=False)
    browser.set_window_size(1366, 900)
    assert severe_console_errors(browser) == []

    browser.get(f"{served.url}/sandboxes/{report['sandboxes'][0]['sandbox_id']}")
    wait_for(lambda: "exiting with code 0" in browser.find_element("id", "log").text, "the logs")
    screenshot(browser, "dashboard-sandbox-logs")
    with served.client() as http:  # more runs, in other states, for the list
        hostile = http.post("/v1/runs", json={"templates": ["web_xss"]}).json()["run_id"]
        http.post("/v1/runs", json={"suites": ["web-slow"], "max_parallel": 2})
    browser.get(served.url + "/")
    wait_for(lambda: run_id in browser.find_element("id", "runs").text, "the run listed")
    hostile_row = f'#runs tr[data-run="{hostile}"] .badge'
    wait_for(lambda: _by_css(browser, hostile_row)[0].text == "failed", "a failed run, live", 60)
    screenshot(browser, "dashboard-runs")


def test_cancel_a_run_from_its_page(browser: Any, served: Served) -> None:
    from selenium.webdriver.common.keys import Keys

    log_in(browser, served.url, served.token, "/")
    wait_for(lambda: browser.find_element("id", "live").text == "live", "the live list")
    browser.execute_script("window.__sameDocument = true")
    with served.client() as http:
        created = http.post("/v1/runs", json={"suites": ["web-slow"], "max_parallel": 2})
    assert created.status_code == 201, created.text
    run_id = created.json()["run_id"]
    link = wait_for(lambda: _by_css(browser, f'#runs a[href="/runs/{run_id}"]'), "the new run")
    assert browser.execute_script("return window.__sameDocument") is True, "listed live"
    link[0].send_keys(Keys.ENTER)  # by keyboard, from here on
    wait_for(lambda: browser.current_url.endswith(f"/runs/{run_id}"), "the run page")
    wait_for(lambda: _row_states(browser).count("running") == 2, "two running sandboxes", 60)
    running = browser.execute_script(
        "return document.querySelector('#sandboxes tr[data-status=running]').id.slice(3)"
    )
    browser.get(f"{served.url}/sandboxes/{running}")  # its logs, followed while it runs
    wait_for(lambda: browser.find_element("id", "logs-state").text == "following", "follow")
    wait_for(lambda: "sleeping" in browser.find_element("id", "log").text, "live logs", 60)
    browser.back()
    wait_for(lambda: _row_states(browser).count("running") == 2, "the run page again", 60)
    _by_css(browser, "#cancel")[0].send_keys(Keys.ENTER)
    wait_for(lambda: _by_css(browser, "dialog[open]"), "the confirmation")
    focused = browser.switch_to.active_element
    assert focused.text == "Keep running", "the safe choice has the focus"
    focused.send_keys(Keys.TAB)
    assert browser.switch_to.active_element.get_attribute("id") == "cancel-confirm"
    browser.switch_to.active_element.send_keys(Keys.ENTER)
    wait_for(
        lambda: set(_row_states(browser)) <= {"cancelled", "skipped"},
        "every row cancelled or skipped",
        60,
    )
    wait_for(lambda: browser.find_element("id", "run-status").text == "cancelled", "run state")
    with served.client() as http:
        run = http.get(f"/v1/runs/{run_id}").json()
    assert run["status"] == "cancelled"
    assert {s["status"] for s in run["sandboxes"]} <= {"cancelled", "skipped"}
    assert _row_states(browser) == [s["status"] for s in run["sandboxes"]]
    browser.get(f"{served.url}/sandboxes/{running}")  # ended: its logs from the archive
    wait_for(lambda: browser.find_element("id", "logs-state").text == "archived", "archive")
    assert "sleeping" in browser.find_element("id", "log").text


def _assert_inert(browser: Any) -> None:
    """The payload is on the page as text; no element it describes exists; nothing ran."""
    assert browser.execute_script("return window.__xss === undefined"), "the payload ran"
    images = browser.execute_script(
        "return Array.from(document.images).filter(i => i.getAttribute('src') === 'x').length"
    )
    assert images == 0
    scripts = browser.execute_script(
        "return Array.from(document.scripts).filter(s => s.textContent.includes('__xss')).length"
    )
    assert scripts == 0


def test_hostile_strings_render_as_text_and_never_run(browser: Any, served: Served) -> None:
    with served.client() as http:
        run_id = http.post("/v1/runs", json={"templates": ["web_xss"]}).json()["run_id"]
    log_in(browser, served.url, served.token, f"/runs/{run_id}")
    # live: the error events arrive through the stream and are added by the page's script
    wait_for(lambda: XSS in browser.find_element("id", "events").text, "the hostile event", 60)
    wait_for(lambda: _row_states(browser) == ["failed"], "the sandbox failed", 60)
    _assert_inert(browser)
    browser.refresh()  # server-rendered: the same strings through the templates
    assert XSS in browser.find_element("id", "events").text
    assert XSS in browser.find_element("id", "sandboxes").text
    _assert_inert(browser)
    sandbox_id = served_sandbox(served, run_id)
    browser.get(f"{served.url}/sandboxes/{sandbox_id}")
    wait_for(lambda: XSS in browser.find_element("id", "log").text, "the logs, as text")
    assert XSS in browser.find_element("css selector", ".description").text
    _assert_inert(browser)
    browser.get(f"{served.url}/new")
    assert XSS in browser.execute_script(
        "return document.querySelector('.template-list').textContent"
    )
    _assert_inert(browser)


def served_sandbox(served: Served, run_id: str) -> str:
    with served.client() as http:
        return str(http.get(f"/v1/runs/{run_id}").json()["sandboxes"][0]["sandbox_id"])


def test_with_tokens_only_the_login_form_is_open(browser: Any, serve: ServeFactory) -> None:
    served = serve()
    browser.get(served.url + "/runs/run-00000000")
    assert "/login" in browser.current_url and "next=/runs/run-00000000" in browser.current_url
    browser.get(served.url + "/static/app.css")
    assert "the dashboard needs a session" in browser.page_source
    log_in(browser, served.url, served.token, "/")
    assert browser.find_element("css selector", "h1").text == "Runs"
