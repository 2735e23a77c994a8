"""
The web console (C{beacon review web}, issue 21) in a real browser:
Debian's headless Chromium driven by Selenium, against a real C{twistd
beacon} and a real C{beacon review web --no-browser}, both subprocesses
stopped by pid at the end. Submissions arrive over HTTP (JSON-RPC
SendMessage to Beacon's public port), as a stranger's would.

One browser, one Beacon and one console for the whole module; the tests run
in the order written and each makes submissions carrying a word of its own
(C{marker}), so that what one finds does not depend on the others. Every
wait is a bounded WebDriverWait or a wait on a process's output with a
deadline; nothing sleeps.

Without C{/usr/bin/chromium}, C{/usr/bin/chromedriver} or selenium the
module is skipped, or fails when C{CI=true}. The screenshots (the inbox and
one submission, 375 and 1440 px wide) land in C{test-output/web-console/}
under the checkout, for a person to look at; C{docs/console-inbox.png} is
one of them.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from peers.process import START_TIMEOUT, Beacon, BeaconLauncher, TwistdProcess

try:
    from selenium import webdriver
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement
    from selenium.webdriver.support.ui import Select, WebDriverWait
except ImportError:  # pragma: no cover - selenium is a test extra
    webdriver = None  # type: ignore[assignment]

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM_ARGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
)
BEACON = Path(sys.executable).parent / "beacon"
ROOT = Path(__file__).resolve().parent.parent
#: Where the screenshots go, for a person to look at.
OUTPUT = ROOT / "test-output" / "web-console"

#: The bound of every wait on the page: a safety net, never a measure.
WAIT = 15.0
#: How soon a submission made over HTTP must show in the open inbox.
LIVE = 2.0
TITLE = "Beacon inbox"
SIGN_IN = re.compile(r"beacon review web: open (http://127\.0\.0\.1:(\d+))/\?token=([A-Za-z0-9_-]+)\s*$")
USED = "This link has been used or is not valid"
DOWN = "Beacon is not answering; reconnecting\u2026"
CONSOLE_DOWN = "The console is not answering; reconnecting\u2026"
SUBMITTED = "TASK_STATE_SUBMITTED"
COMPLETED = "TASK_STATE_COMPLETED"
REJECTED = "TASK_STATE_REJECTED"


def need_browser() -> None:
    """Skip (fail when CI=true) unless Chromium, its driver and selenium are here."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if webdriver is None:
        missing.append("selenium (pip install -e '.[test]')")
    if missing:
        why = "the web console's browser tests need " + ", ".join(missing)
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why} (CI=true)")
        pytest.skip(f"{why} (apt-get install chromium chromium-driver)")


def marker() -> str:
    """A word no other test's submissions carry."""
    return "m" + uuid.uuid4().hex[:10]


# Beacon, the console and the browser: one each for the module.


class Inbox:
    """The running Beacon, where it keeps its data, and how to restart it."""

    def __init__(self, launcher: BeaconLauncher, config: Path) -> None:
        self.launcher = launcher
        self.config = config
        self.beacon = self.start()

    def start(self) -> Beacon:
        return self.launcher.start("--config", str(self.config))

    def send(self, parts: list[dict[str, Any]]) -> str:
        """SendMessage C{parts} to Beacon's public JSON-RPC door; the new task's id."""
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {"messageId": str(uuid.uuid4()), "role": "ROLE_USER", "parts": parts}
            },
        }
        answer = httpx.post(
            f"http://127.0.0.1:{self.beacon.port}/a2a/v1",
            json=body,
            headers={"A2A-Version": "1.0"},
            timeout=WAIT,
        )
        assert answer.status_code == 200, answer.text
        task_id: str = answer.json()["result"]["task"]["id"]
        return task_id

    def text(self, text: str) -> str:
        return self.send([{"text": text}])

    def data(self, data: dict[str, Any]) -> str:
        return self.send([{"data": data, "mediaType": "application/json"}])


#: Submissions a reader might see on a quiet day (the screenshots show them).
EVERYDAY: list[dict[str, Any]] = [
    {
        "data": {
            "from": {"name": "Ada", "agent": "ada-assistant/2.1", "operator": "Example Lab"},
            "subject": "Dataset licence question",
            "body": "Could the maintainers confirm the licence of the 2025 snapshot?\n"
            "We would like to cite it in a paper.",
            "language": "en",
            "contact": [{"kind": "email", "value": "ada@example.org"}],
        }
    },
    {"text": "Your search page answers 500 when the query is empty.\nSeen at 09:14 UTC."},
    {
        "data": {
            "from": {"name": "crawler-7"},
            "subject": "Broken link report",
            "body": "The page at /docs/start links to a page that no longer exists.",
        }
    },
    {"text": "Hello! Is there a public roadmap for next year's release?\n\nThanks, Sam"},
    {
        "data": {
            "from": {"name": "Ines", "operator": "Northwind Research"},
            "subject": "Collaboration on the evaluation suite",
            "body": "We maintain a similar suite and would like to compare notes.",
            "contact": [{"kind": "url", "value": "https://northwind.example/eval"}],
        }
    },
]


@pytest.fixture(scope="module")
def inbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Inbox]:
    need_browser()
    cwd = tmp_path_factory.mktemp("web-console")
    config = cwd / "beacon.toml"
    # No rate limit (every submission comes from 127.0.0.1), and room for
    # a 64 KiB line in one SendMessage.
    config.write_text("[limits]\nrate = 0\nmax_body = 262144\n", encoding="utf-8")
    launcher = BeaconLauncher(cwd)
    try:
        inbox = Inbox(launcher, config)
        for part in EVERYDAY:
            inbox.send([part])
        yield inbox
    finally:
        launcher.close()


class Console:
    """The running C{beacon review web}: its process, origin and sign-in link."""

    def __init__(self, process: TwistdProcess, origin: str, port: int, token: str) -> None:
        self.process = process
        self.origin = origin
        self.port = port
        self.token = token
        self.sign_in = f"{origin}/?token={token}"
        self.cookie = ""

    def http(self, *, origin: str | None = None, **headers: str) -> httpx.Client:
        """A plain HTTP client with the session cookie (and Origin, if given)."""
        sent = {"Cookie": f"beacon-console={self.cookie}", **headers}
        if origin is not None:
            sent["Origin"] = origin
        return httpx.Client(base_url=self.origin, headers=sent, timeout=WAIT)

    def task(self, task_id: str) -> dict[str, Any]:
        """The task, as the console's API answers it."""
        with self.http() as client:
            answer = client.get(f"/api/tasks/{task_id}")
        assert answer.status_code == 200, answer.text
        task: dict[str, Any] = answer.json()
        return task

    def decide(self, task_id: str, decision: str, note: str | None = None) -> None:
        body = {"decision": decision} if note is None else {"decision": decision, "note": note}
        with self.http(origin=self.origin) as client:
            answer = client.post(f"/api/tasks/{task_id}/decide", json=body)
        assert answer.status_code == 200, answer.text


@pytest.fixture(scope="module")
def console(inbox: Inbox) -> Iterator[Console]:
    data = str(inbox.launcher.data)
    # TwistdProcess runs any command given through wrap: here the console,
    # its output read line by line in a thread.
    process = TwistdProcess(
        [],
        inbox.launcher.cwd,
        wrap=lambda _: [str(BEACON), "review", "web", "--no-browser", "--data", data],
    )
    try:
        match = process.wait_for(SIGN_IN, START_TIMEOUT)
        yield Console(process, match.group(1), int(match.group(2)), match.group(3))
    finally:
        process.close()


@pytest.fixture(scope="module")
def driver(console: Console, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in CHROMIUM_ARGS:
        options.add_argument(argument)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium')}")
    browser = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        browser.set_page_load_timeout(WAIT)
        browser.set_script_timeout(WAIT)
        width(browser, 1440)
        yield browser
    finally:
        browser.quit()


# Helpers on the page.


def wait(driver: WebDriver, condition: Callable[[WebDriver], Any], timeout: float = WAIT) -> Any:
    """Wait until C{condition} holds; a row replaced meanwhile is looked up again."""
    return WebDriverWait(driver, timeout, ignored_exceptions=(StaleElementReferenceException,)).until(
        condition
    )


def width(driver: WebDriver, pixels: int, height: int | None = None) -> None:
    """Make the viewport exactly C{pixels} wide (a phone's, under 760)."""
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {
            "width": pixels,
            "height": height or (900 if pixels > 760 else 812),
            "deviceScaleFactor": 1,
            "mobile": pixels <= 760,
        },
    )


def by_id(driver: WebDriver, name: str) -> WebElement:
    return driver.find_element(By.ID, name)


def row_ids(driver: WebDriver) -> list[str]:
    """The ids of the inbox's rows, top to bottom (read at once, in the page)."""
    ids: list[str] = driver.execute_script(
        "return Array.from(document.querySelectorAll('#inbox .row'), (r) => r.dataset.id)"
    )
    return ids


def row(driver: WebDriver, task_id: str) -> WebElement:
    return driver.find_element(By.CSS_SELECTOR, f'#inbox .row[data-id="{task_id}"]')


def row_state(driver: WebDriver, task_id: str) -> str | None:
    """The state on a row (None: no such row)."""
    state: str | None = driver.execute_script(
        "const r = document.querySelector(`#inbox .row[data-id='${arguments[0]}']`);"
        " return r ? r.dataset.state : null",
        task_id,
    )
    return state


def text_of(element: WebElement) -> str:
    return str(element.get_attribute("textContent"))


def status_code(driver: WebDriver) -> int:
    """The HTTP status of the page the browser shows."""
    code: int = driver.execute_script(
        "return performance.getEntriesByType('navigation')[0].responseStatus"
    )
    return code


def open_inbox(driver: WebDriver, console: Console) -> None:
    """Load the inbox afresh and wait until its list and live stream are there."""
    driver.get(console.origin + "/")
    wait(driver, lambda d: d.find_element(By.TAG_NAME, "html").get_attribute("data-events") == "ready")
    wait(driver, lambda d: by_id(d, "total").text != "")


def search(driver: WebDriver, words: str, expected: set[str]) -> list[str]:
    """Search the inbox for C{words}; wait for exactly the C{expected} rows."""
    box = by_id(driver, "search")
    box.clear()
    box.send_keys(words, Keys.ENTER)
    wait(driver, lambda d: set(row_ids(d)) == expected)
    return row_ids(driver)


def opened(driver: WebDriver, task_id: str) -> None:
    """Wait until the submission C{task_id} is shown, its whole answer in."""
    wait(driver, lambda d: by_id(d, "detail-view").get_attribute("data-loaded") == task_id)
    assert by_id(driver, "detail-view").is_displayed()


def open_row(driver: WebDriver, task_id: str) -> None:
    row(driver, task_id).find_element(By.CSS_SELECTOR, ".open").click()
    opened(driver, task_id)
    assert driver.execute_script("return location.hash") == f"#/task/{task_id}"


def keys(driver: WebDriver, *typed: str) -> None:
    """Type C{typed} wherever the focus is, as a person at the keyboard would."""
    ActionChains(driver).send_keys(*typed).perform()


def ctrl_enter(driver: WebDriver) -> None:
    ActionChains(driver).key_down(Keys.CONTROL).send_keys(Keys.ENTER).key_up(Keys.CONTROL).perform()


def active_id(driver: WebDriver) -> str:
    return str(driver.switch_to.active_element.get_attribute("id"))


def screenshot(driver: WebDriver, name: str) -> Path:
    OUTPUT.mkdir(parents=True, exist_ok=True)
    path = OUTPUT / f"{name}.png"
    assert driver.save_screenshot(str(path)), path
    return path


# The tests, in the order they run.


def sign_in(driver: WebDriver, console: Console) -> None:
    """Spend the module's console's link once (for tests that do not test signing in); keep its session cookie."""
    if console.cookie:
        return
    driver.get(console.sign_in)
    wait(driver, lambda d: by_id(d, "total").text != "")
    cookie = driver.get_cookie("beacon-console")
    assert cookie is not None
    console.cookie = cookie["value"]


def test_sign_in_link_works_once(driver: WebDriver, console: Console) -> None:
    """
    The printed link signs in once: it sets an HttpOnly, SameSite=Strict
    session cookie and redirects to a URL without the token; the same link
    again (a browser without the cookie) gets the 401 page, and so does
    any request without the cookie.
    """
    driver.get(console.sign_in)
    wait(driver, lambda d: by_id(d, "total").text != "")
    assert driver.current_url == console.origin + "/"
    assert "token" not in driver.current_url
    cookie = driver.get_cookie("beacon-console")
    assert cookie is not None
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/"
    assert driver.execute_script("return document.cookie") == ""
    console.cookie = cookie["value"]

    # Another browser (no cookie) with the same link: refused.
    driver.delete_all_cookies()
    driver.get(console.sign_in)
    assert status_code(driver) == 401
    assert USED in driver.find_element(By.TAG_NAME, "body").text
    assert "beacon review web" in driver.find_element(By.TAG_NAME, "body").text
    driver.get(console.origin + "/")
    assert status_code(driver) == 401
    with httpx.Client(base_url=console.origin, timeout=WAIT) as plain:
        assert plain.get("/api/tasks").status_code == 401
        assert plain.get(f"/?token={console.token}").status_code == 401

    # The session itself still works: the cookie back, the inbox back.
    driver.add_cookie(cookie)
    open_inbox(driver, console)
    assert driver.title == TITLE


def test_screenshots_of_the_inbox_and_a_submission(
    driver: WebDriver, console: Console, inbox: Inbox
) -> None:
    """
    The inbox and one submission at 375 and 1440 px, saved for a person to
    look at; neither width scrolls sideways.
    """
    open_inbox(driver, console)
    ids = row_ids(driver)
    assert len(ids) == len(EVERYDAY)
    console.decide(ids[2], "accept", "Answered by mail on Tuesday.")
    console.decide(ids[3], "reject")
    open_inbox(driver, console)
    wait(driver, lambda d: row_state(d, ids[2]) == COMPLETED and row_state(d, ids[3]) == REJECTED)
    for pixels in (1440, 375):
        # Wide, the five rows leave the bottom empty: a shorter window.
        width(driver, pixels, 420 if pixels == 1440 else None)
        driver.execute_script("window.scrollTo(0, 0)")
        assert driver.execute_script("return document.documentElement.scrollWidth") <= pixels
        screenshot(driver, f"inbox-{pixels}")
    # Dark, when the system says so.
    driver.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": "dark"}]},
    )
    background = "return getComputedStyle(document.body).backgroundColor"
    wait(driver, lambda d: d.execute_script(background) == "rgb(13, 17, 23)")
    screenshot(driver, "inbox-375-dark")
    driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    wait(driver, lambda d: d.execute_script(background) == "rgb(255, 255, 255)")
    target = ids[-1]  # the oldest: Ada's structured message
    open_row(driver, target)
    assert by_id(driver, "detail-subject").text == "Dataset licence question"
    for pixels in (1440, 375):
        width(driver, pixels)
        driver.execute_script("window.scrollTo(0, 0)")
        assert driver.execute_script("return document.documentElement.scrollWidth") <= pixels
        screenshot(driver, f"submission-{pixels}")
    width(driver, 1440)


def test_list_search_filters_and_paging(driver: WebDriver, console: Console, inbox: Inbox) -> None:
    """
    The inbox lists received time, door, size, the subject or first line
    and the state; search, the state, door and date filters and the sort
    narrow it; "More" fetches the next page (50 a page).
    """
    word = marker()
    apples = inbox.text(f"apples {word}\nsecond line")
    pears = inbox.data(
        {"from": {"name": "Pat"}, "subject": f"Pears {word}", "body": "ripe", "language": "en"}
    )
    others = {inbox.text(f"unrelated {marker()}")}
    open_inbox(driver, console)
    assert search(driver, word, {apples, pears}) == [pears, apples]

    first = row(driver, pears)
    assert text_of(first.find_element(By.CSS_SELECTOR, ".subject")) == f"Pears {word}"
    assert text_of(first.find_element(By.CSS_SELECTOR, ".state")) == "undecided"
    assert text_of(first.find_element(By.CSS_SELECTOR, ".door")) == "jsonrpc"
    assert re.fullmatch(r"\d+ B", text_of(first.find_element(By.CSS_SELECTOR, ".size")))
    received = text_of(first.find_element(By.CSS_SELECTOR, ".received"))
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ", received)
    assert text_of(row(driver, apples).find_element(By.CSS_SELECTOR, ".subject")) == f"apples {word}"

    console.decide(apples, "reject")
    Select(by_id(driver, "state")).select_by_visible_text("undecided")
    wait(driver, lambda d: row_ids(d) == [pears])
    Select(by_id(driver, "state")).select_by_visible_text("rejected")
    wait(driver, lambda d: row_ids(d) == [apples])
    Select(by_id(driver, "state")).select_by_visible_text("accepted")
    wait(driver, lambda d: row_ids(d) == [] and by_id(d, "empty").is_displayed())
    assert by_id(driver, "empty").text == "No submissions match."
    Select(by_id(driver, "state")).select_by_value("")
    Select(by_id(driver, "door")).select_by_value("websocket")
    wait(driver, lambda d: row_ids(d) == [])
    Select(by_id(driver, "door")).select_by_value("jsonrpc")
    wait(driver, lambda d: set(row_ids(d)) == {apples, pears})
    # Sorted by last update, the rejected one (updated last) comes first.
    Select(by_id(driver, "sort")).select_by_value("updated")
    wait(driver, lambda d: row_ids(d) == [apples, pears])
    Select(by_id(driver, "sort")).select_by_value("received")
    wait(driver, lambda d: row_ids(d) == [pears, apples])

    # Dates (UTC days): until yesterday finds none, since yesterday both.
    yesterday = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=1)).date()
    set_date = "arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('change', {bubbles: true}))"
    driver.execute_script(set_date, by_id(driver, "until"), yesterday.isoformat())
    wait(driver, lambda d: row_ids(d) == [] and by_id(d, "empty").is_displayed())
    driver.execute_script(set_date, by_id(driver, "until"), "")
    driver.execute_script(set_date, by_id(driver, "since"), yesterday.isoformat())
    wait(driver, lambda d: set(row_ids(d)) == {apples, pears})
    by_id(driver, "clear").click()
    wait(driver, lambda d: by_id(d, "search").get_attribute("value") == "" and others <= set(row_ids(d)))

    # Paging: 52 matching, 50 a page; "More" shows the last 2.
    many = marker()
    sent = [inbox.text(f"page {many} {n}") for n in range(52)]
    search(driver, many, set(sent[2:]))
    assert row_ids(driver) == sent[::-1][:50]
    assert by_id(driver, "total").text == "50 of 52 submissions"
    by_id(driver, "more").click()
    wait(driver, lambda d: row_ids(d) == sent[::-1])
    assert not by_id(driver, "more").is_displayed()


def test_open_and_decide(driver: WebDriver, console: Console, inbox: Inbox) -> None:
    """
    Opening a submission shows its whole content, received time, door,
    receipt; next and previous move between submissions; accepting one
    with a note opens the next undecided one, and the accepted one shows
    the decision and the note, in the page and in the list.
    """
    word = marker()
    older = inbox.text(f"older {word}\nline two\n\nline four")
    newer = inbox.data(
        {
            "from": {"name": "Kim", "agent": "kim-bot/1"},
            "subject": f"Question {word}",
            "body": "First paragraph.\n\nSecond paragraph.",
            "contact": [{"kind": "email", "value": "kim@example.org"}],
        }
    )
    open_inbox(driver, console)
    search(driver, word, {older, newer})
    open_row(driver, newer)
    content = by_id(driver, "content")
    cells = [text_of(c) for c in content.find_elements(By.CSS_SELECTOR, "table.data td")]
    fields = [text_of(c) for c in content.find_elements(By.CSS_SELECTOR, "table.data tbody th")]
    assert dict(zip(fields, cells))["from.agent"] == "kim-bot/1"
    assert dict(zip(fields, cells))["contact[0].value"] == "kim@example.org"
    assert dict(zip(fields, cells))["body"] == "First paragraph.\n\nSecond paragraph."
    task = console.task(newer)
    shown = text_of(by_id(driver, "fields"))
    assert task["metadata"]["receipt"]["sha256"] in shown
    assert "jsonrpc" in shown and "structured" in shown
    assert by_id(driver, "decision").text == "Undecided."

    by_id(driver, "next").click()
    opened(driver, older)
    assert text_of(by_id(driver, "content").find_element(By.CSS_SELECTOR, "pre.text")) == (
        f"older {word}\nline two\n\nline four"
    )
    by_id(driver, "previous").click()
    opened(driver, newer)
    assert by_id(driver, "detail-subject").text == f"Question {word}"

    by_id(driver, "note").send_keys(f"Looks fine; answered. {word}")
    by_id(driver, "accept").click()
    opened(driver, older)
    assert by_id(driver, "status").text == "Accepted; the next undecided submission is open."
    by_id(driver, "previous").click()
    opened(driver, newer)
    assert by_id(driver, "decision").get_attribute("data-state") == COMPLETED
    assert by_id(driver, "decision").text.startswith("Accepted ")
    assert f"Looks fine; answered. {word}" in by_id(driver, "decision").text
    assert not by_id(driver, "decide-form").is_displayed()
    decided = console.task(newer)
    assert decided["status"]["state"] == COMPLETED
    assert decided["status"]["message"]["parts"][0]["text"] == f"Looks fine; answered. {word}"

    by_id(driver, "back").click()
    wait(driver, lambda d: by_id(d, "list-view").is_displayed())
    assert row_state(driver, newer) == COMPLETED
    assert text_of(row(driver, newer).find_element(By.CSS_SELECTOR, ".state")) == "accepted"


def confirm_bulk(driver: WebDriver, button: str, question: str) -> None:
    """Press a bulk button; the confirmation must ask C{question}; confirm."""
    by_id(driver, button).click()
    dialog = by_id(driver, "confirm")
    wait(driver, lambda d: dialog.get_attribute("open") is not None)
    assert by_id(driver, "confirm-title").text == question
    by_id(driver, "confirm-ok").click()
    wait(driver, lambda d: dialog.get_attribute("open") is None)


def test_bulk_decisions(driver: WebDriver, console: Console, inbox: Inbox) -> None:
    """
    Two ticked and rejected after a confirmation showing 2; "select all
    matching" takes every undecided one the filters match; deciding one
    already decided says so.
    """
    word = marker()
    ids = [inbox.text(f"bulk {word} {n}") for n in range(3)]
    open_inbox(driver, console)
    search(driver, word, set(ids))
    for task_id in ids[:2]:
        row(driver, task_id).find_element(By.CSS_SELECTOR, ".pick").click()
    assert by_id(driver, "selected-count").text == "2 selected"
    confirm_bulk(driver, "bulk-reject", "Reject 2 undecided submissions?")
    wait(driver, lambda d: by_id(d, "status").get_attribute("data-decided") == "2")
    wait(driver, lambda d: [row_state(d, i) for i in ids] == [REJECTED, REJECTED, SUBMITTED])
    assert by_id(driver, "status").text.startswith("Rejected 2; 0 already decided")

    by_id(driver, "select-matching").click()
    wait(driver, lambda d: by_id(d, "selected-count").text.startswith("1 selected"))
    confirm_bulk(driver, "bulk-accept", "Accept 1 undecided submission?")
    wait(driver, lambda d: by_id(d, "status").get_attribute("data-decided") == "1")
    wait(driver, lambda d: row_state(d, ids[2]) == COMPLETED)

    # One decided meanwhile (elsewhere, unheard here): Beacon says so.
    fourth = inbox.text(f"bulk {word} 3")
    search(driver, word, {*ids, fourth})
    row(driver, fourth).find_element(By.CSS_SELECTOR, ".pick").click()
    by_id(driver, "bulk-accept").click()
    dialog = by_id(driver, "confirm")
    wait(driver, lambda d: dialog.get_attribute("open") is not None)
    assert by_id(driver, "confirm-title").text == "Accept 1 undecided submission?"
    console.decide(fourth, "reject")
    by_id(driver, "confirm-ok").click()
    wait(driver, lambda d: by_id(d, "status").get_attribute("data-already-decided") == "1")
    assert by_id(driver, "status").text.startswith("Accepted 0; 1 already decided")
    assert console.task(fourth)["status"]["state"] == REJECTED


def test_live_arrival_within_two_seconds(driver: WebDriver, console: Console, inbox: Inbox) -> None:
    """
    A SendMessage over HTTP shows at the top of the open inbox within 2 s,
    without a reload, counted in the tab's title; a decision made elsewhere
    shows on its row.
    """
    open_inbox(driver, console)
    assert driver.title == TITLE
    before = row_ids(driver)
    word = marker()
    new = inbox.text(f"live {word}")
    wait(driver, lambda d: row_ids(d)[:1] == [new], LIVE)
    assert row_ids(driver)[1:] == before
    assert driver.title == f"(1) {TITLE}"
    assert text_of(row(driver, new).find_element(By.CSS_SELECTOR, ".subject")) == f"live {word}"
    console.decide(new, "reject", "not for us")
    wait(driver, lambda d: row_state(d, new) == REJECTED, LIVE)


def test_keyboard_only(driver: WebDriver, console: Console, inbox: Inbox) -> None:
    """
    Without the mouse: / searches, j/k move, o opens, a focuses the note,
    Ctrl+Enter accepts with it (the next undecided opens); u goes back; r
    rejects; x selects; ?
    shows the keys; Tab reaches every control, each with a focus ring.
    """
    word = marker()
    first = inbox.text(f"keys {word} first")
    second = inbox.text(f"keys {word} second")
    open_inbox(driver, console)
    keys(driver, "/")
    assert active_id(driver) == "search"
    keys(driver, word, Keys.ENTER)
    wait(driver, lambda d: row_ids(d) == [second, first])
    keys(driver, Keys.ESCAPE, "j")
    wait(driver, lambda d: "current" in str(row(d, first).get_attribute("class")))
    keys(driver, "k")
    wait(driver, lambda d: "current" in str(row(d, second).get_attribute("class")))
    keys(driver, "o")
    opened(driver, second)
    assert f"keys {word} second" in text_of(by_id(driver, "content"))
    keys(driver, "a")
    assert active_id(driver) == "note"
    keys(driver, "typed at the keyboard")
    ctrl_enter(driver)
    opened(driver, first)
    assert console.task(second)["status"]["message"]["parts"][0]["text"] == "typed at the keyboard"

    keys(driver, "u")
    wait(driver, lambda d: by_id(d, "list-view").is_displayed())
    keys(driver, "j", "r")
    opened(driver, first)
    wait(driver, lambda d: active_id(d) == "note")
    assert f"keys {word} first" in text_of(by_id(driver, "content"))
    keys(driver, "changed my mind", Keys.ESCAPE)
    assert active_id(driver) != "note"
    keys(driver, "r", "no thanks")
    ctrl_enter(driver)
    wait(driver, lambda d: by_id(d, "decision").get_attribute("data-state") == REJECTED)
    assert console.task(first)["status"]["message"]["parts"][0]["text"] == "changed my mindno thanks"
    keys(driver, Keys.ESCAPE)
    wait(driver, lambda d: by_id(d, "list-view").is_displayed())
    keys(driver, "x")
    wait(driver, lambda d: by_id(d, "selected-count").text == "1 selected")
    keys(driver, "x")
    wait(driver, lambda d: by_id(d, "selected-count").text == "None selected")
    keys(driver, "?")
    wait(driver, lambda d: by_id(d, "keys").get_attribute("open") is not None)
    keys(driver, Keys.ESCAPE)
    wait(driver, lambda d: by_id(d, "keys").get_attribute("open") is None)

    # Tab from the top: every control of the inbox, each drawn with a ring;
    # then the same in an undecided submission.
    assert tabbed_to(driver, 30) >= {
        "keys-button", "search", "state", "door", "since", "until", "sort", "apply",
        "clear", "select-page", "select-matching", "pick", "open",
    }
    third = inbox.text(f"keys {word} third")
    fourth = inbox.text(f"keys {word} fourth")
    open_inbox(driver, console)
    keys(driver, "/", word, Keys.ENTER)
    wait(driver, lambda d: row_ids(d) == [fourth, third, second, first])
    keys(driver, Keys.ESCAPE, "j", "o")  # the second row: both neighbours there
    opened(driver, third)
    # At 1440 px the list's controls come first: it is beside the submission.
    assert tabbed_to(driver, 40) >= {"keys-button", "back", "previous", "next", "note", "accept", "reject"}


def tabbed_to(driver: WebDriver, presses: int) -> set[str]:
    """
    Press Tab C{presses} times from the top of the page: the ids (or
    classes) of what got the focus, each checked to show a focus ring.
    """
    driver.execute_script(
        """
        window.focusedByTab = [];
        document.addEventListener('focusin', (e) => {
          const t = e.target;
          const style = getComputedStyle(t);
          window.focusedByTab.push({
            name: t.id || t.className,
            ring: style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) >= 2,
          });
        });
        document.activeElement.blur();
        window.scrollTo(0, 0);
        """
    )
    ActionChains(driver).send_keys(*[Keys.TAB] * presses).perform()
    focused = driver.execute_script("return window.focusedByTab")
    assert all(f["ring"] for f in focused), focused
    return {f["name"] for f in focused}


class CrossOrigin(BaseHTTPRequestHandler):
    """A page on another loopback port that POSTs a decision to the console."""

    target = ""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = (
            "<!doctype html><title>elsewhere</title>"
            f'<form id="f" method="POST" enctype="text/plain" action="{self.target}">'
            '<input name=\'{"decision":"accept","note":"\' value=\'csrf"}\'></form>'
            "<script>document.getElementById('f').submit()</script>"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_wrong_host_and_cross_origin_refused(
    driver: WebDriver, console: Console, inbox: Inbox
) -> None:
    """
    A Host other than the console's address (DNS rebinding) gets 403; a
    POST without the console's Origin gets 403, from httpx and from a page
    of another origin in the browser (which sends the cookie: same site);
    the submission stays undecided.
    """
    victim = inbox.text(f"victim {marker()}")
    with console.http(Host=f"evil.example:{console.port}") as rebound:
        refused = rebound.get("/")
        assert refused.status_code == 403 and "wrong Host" in refused.text
        assert rebound.get("/api/tasks").status_code == 403
    decide = f"/api/tasks/{victim}/decide"
    body = {"decision": "accept", "note": "csrf"}
    with console.http(origin="http://evil.example") as elsewhere:
        assert elsewhere.post(decide, json=body).status_code == 403
        assert elsewhere.post("/api/decide-many", json={"ids": [victim], **body}).status_code == 403
    with console.http() as no_origin:
        assert no_origin.post(decide, json=body).status_code == 403
    with console.http(origin=f"http://127.0.0.1:{console.port + 1}") as other_port:
        assert other_port.post(decide, json=body).status_code == 403
    assert console.task(victim)["status"]["state"] == SUBMITTED

    handler = type("Handler", (CrossOrigin,), {"target": console.origin + decide})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="cross-origin", daemon=True)
    thread.start()
    try:
        driver.get(f"http://127.0.0.1:{server.server_address[1]}/")
        wait(driver, lambda d: d.current_url.startswith(console.origin))
        assert status_code(driver) == 403
    finally:
        server.shutdown()
        server.server_close()
        thread.join(WAIT)
    assert console.task(victim)["status"]["state"] == SUBMITTED


def visible(text: str) -> str:
    """C{text} as the page shows it: hidden characters as their marks."""
    hidden = re.compile(
        "[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u2028-\u202e"
        "\u2060-\u2064\u2066-\u2069\ufeff]"
    )
    return hidden.sub(lambda m: f"\u27e8U+{ord(m.group()):04X}\u27e9", text)


def test_hostile_submissions_stay_text(driver: WebDriver, console: Console, inbox: Inbox) -> None:
    """
    Markup, script, javascript: URLs, a closing textarea, direction
    overrides and invisible characters, a 64 KiB line and structured data
    with HTML in every field: shown as the literal text, in the list and
    opened; no script runs (title and script count unchanged), nothing is
    fetched from elsewhere, the policy is never broken, the long line wraps
    within the viewport at both widths.
    """
    word = marker()
    texts = [
        f"<script>document.title='owned'</script> {word}",
        f"<img src=x onerror=\"document.title='owned'\"><img src=\"http://127.0.0.1:9/x.png\"> {word}",
        f"javascript:alert(document.domain) <a href=\"javascript:alert(1)\">click</a> {word}",
        f"</textarea><script>document.title='owned'</script><textarea> {word}",
        f"invoice\u202egpj.exe zero\u200bwidth \u2066isolate\u2069 bell\u0007 bom\ufeff {word}",
        f"{word} " + "W" * 65536,
    ]
    ids = {inbox.text(t): t for t in texts}
    structured: dict[str, Any] = {
        "from": {
            "name": "<b onmouseover=alert(1)>name</b>",
            "agent": "<script>document.title='owned'</script>",
            "operator": "<img src=x onerror=alert(1)>",
        },
        "subject": f"<iframe src=\"javascript:alert(1)\"></iframe> {word}",
        "body": "<a href='javascript:alert(1)'>click</a>\n<style>body{display:none}</style>",
        "contact": [
            {"kind": "url", "value": "javascript:alert(document.cookie)"},
            {"kind": "email", "value": "<a href=\"mailto:x@example.org\">mail</a>"},
            {"kind": "a2a", "value": "http://127.0.0.1:9/<svg onload=alert(1)>"},
            {"kind": "other", "value": "</td></tr></table><script>alert(1)</script>"},
        ],
    }
    data_id = inbox.data(structured)

    open_inbox(driver, console)
    scripts = driver.execute_script("return document.scripts.length")
    assert driver.title == TITLE
    search(driver, word, {*ids, data_id})
    for task_id, text in ids.items():
        subject = text_of(row(driver, task_id).find_element(By.CSS_SELECTOR, ".subject"))
        assert subject.rstrip("\u2026") in visible(text)
    assert text_of(row(driver, data_id).find_element(By.CSS_SELECTOR, ".subject")) == structured["subject"]

    for task_id, text in ids.items():
        open_row(driver, task_id)
        pre = by_id(driver, "content").find_element(By.CSS_SELECTOR, "pre.text")
        assert text_of(pre) == visible(text)
        if len(text) > 65536:
            for pixels in (375, 1440):
                width(driver, pixels)
                inner = driver.execute_script("return window.innerWidth")
                assert pre.rect["width"] <= inner
                assert driver.execute_script("return document.documentElement.scrollWidth") <= inner
        keys(driver, "u")
        wait(driver, lambda d: by_id(d, "list-view").is_displayed())
    marks = row(driver, list(ids)[4]).find_elements(By.CSS_SELECTOR, ".subject .ctl")
    assert [m.text for m in marks] == ["\u27e8U+202E\u27e9", "\u27e8U+200B\u27e9", "\u27e8U+2066\u27e9", "\u27e8U+2069\u27e9", "\u27e8U+0007\u27e9", "\u27e8U+FEFF\u27e9"]

    open_row(driver, data_id)
    table = by_id(driver, "content").find_element(By.CSS_SELECTOR, "table.data")
    pairs = {
        text_of(tr.find_element(By.TAG_NAME, "th")): text_of(tr.find_element(By.TAG_NAME, "td"))
        for tr in table.find_elements(By.CSS_SELECTOR, "tbody tr")
    }
    assert pairs == {
        "from.name": structured["from"]["name"],
        "from.agent": structured["from"]["agent"],
        "from.operator": structured["from"]["operator"],
        "subject": structured["subject"],
        "body": structured["body"],
        **{
            f"contact[{n}].{key}": contact[key]
            for n, contact in enumerate(structured["contact"])
            for key in ("kind", "value")
        },
    }
    assert by_id(driver, "detail-subject").text == structured["subject"]
    keys(driver, "u")
    wait(driver, lambda d: by_id(d, "list-view").is_displayed())

    page = driver.execute_script(
        """
        return {
          title: document.title,
          scripts: document.scripts.length,
          links: document.querySelectorAll('a, iframe, object, embed, svg, style').length,
          images: Array.from(document.images, (i) => i.getAttribute('src')),
          resources: performance.getEntriesByType('resource').map((e) => e.name),
          violations: document.documentElement.dataset.cspViolations,
        };
        """
    )
    assert page["title"] == TITLE
    assert page["scripts"] == scripts == 1
    assert page["links"] == 0
    assert page["images"] == ["/static/icon.svg"]
    assert page["resources"] and all(
        name.startswith(console.origin + "/") for name in page["resources"]
    ), page["resources"]
    assert page["violations"] == "0"
    # The console logs each report it gets (console.csp_violation, on its
    # standard error, which TwistdProcess reads with its output).
    assert "console.csp_violation" not in console.process.output

    # And the zeros mean something: what the policy does block (an image
    # from elsewhere, put in by hand here) is counted and reported.
    driver.execute_script(
        "const i = document.createElement('img'); i.src = 'http://127.0.0.1:9/x.png';"
        " document.body.append(i)"
    )
    wait(driver, lambda d: d.find_element(By.TAG_NAME, "html").get_attribute("data-csp-violations") == "1")
    assert "Content-Security-Policy" in by_id(driver, "status").text
    console.process.wait_for("console.csp_violation", WAIT)


def test_beacon_down_and_back(driver: WebDriver, console: Console, inbox: Inbox) -> None:
    """
    When Beacon stops, the page says so; when it is back (same data
    directory), the banner goes and the inbox is fetched again.
    """
    open_inbox(driver, console)
    inbox.beacon.process.stop_cleanly()
    wait(driver, lambda d: by_id(d, "banner").is_displayed())
    assert by_id(driver, "banner").text == DOWN
    inbox.beacon = inbox.start()
    word = marker()
    back = inbox.text(f"back {word}")
    # The console retries 1 s, 2 s, 4 s ... apart (at most 10 s).
    wait(driver, lambda d: not by_id(d, "banner").is_displayed(), WAIT + 10)
    wait(driver, lambda d: back in row_ids(d))


#: In the page: the next /api/tasks answer is fetched at once but handed
#: to the console only when window.releaseList() is called; window.listRead
#: is true once the console has answered it (so the list was read then).
HOLD_NEXT_LIST = """
const realFetch = window.fetch;
window.listRead = false;
window.releaseList = null;
window.fetch = (input, init) => {
  const answer = realFetch(input, init);
  if (!String(input).startsWith("/api/tasks?")) {
    return answer;
  }
  window.fetch = realFetch;
  answer.then((response) => response.clone().text()).then(() => { window.listRead = true; });
  return new Promise((resolve) => { window.releaseList = () => resolve(answer); });
};
"""


def test_a_submission_heard_while_the_list_reloads_stays_on_it(
    driver: WebDriver, console: Console, inbox: Inbox
) -> None:
    """
    A submission stored after a fresh list was read, but heard live before
    that list reached the page (a reconnection, a filter, "show"), stays on
    the page once the list is shown: what was heard meanwhile is applied to
    it again.
    """
    open_inbox(driver, console)
    driver.execute_script(HOLD_NEXT_LIST)
    box = by_id(driver, "search")
    box.clear()
    box.send_keys(Keys.ENTER)
    wait(driver, lambda d: d.execute_script("return window.listRead") is True)
    late = inbox.text(f"late {marker()}")
    wait(driver, lambda d: late in row_ids(d))
    driver.execute_script("window.releaseList()")
    wait(driver, lambda d: by_id(d, "inbox").get_attribute("aria-busy") is None)
    assert row_ids(driver)[0] == late


def test_console_stops_on_sigterm(driver: WebDriver, console: Console) -> None:
    """SIGTERM: the console stops listening, says so, exits 0; the page notices."""
    open_inbox(driver, console)
    assert console.process.terminate() == 0
    assert "beacon review web: stopped" in console.process.output.splitlines()
    wait(driver, lambda d: by_id(d, "banner").text == CONSOLE_DOWN)
