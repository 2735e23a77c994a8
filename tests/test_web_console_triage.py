"""
The web console's triage (issue 42): on a wide screen the opened
submission shows beside the list; j/k, Enter and Escape move, open and go
back; a and r ask first (Ctrl+Enter confirms, Escape cancels, nothing
sent) and a decision opens the next undecided submission in the list's
order; the keys sheet lists it all. On a phone (375 px) the list comes
first, the filters fold behind "Filters" and an opened submission's
Accept and Reject are on the first screen.

It drives C{tests/test_web_console.py}'s Beacon, console and Chromium (one
each for this module). Every wait is a bounded WebDriverWait; nothing
sleeps. Without Chromium, its driver or selenium the module is skipped, or
fails when C{CI=true}.
"""

from __future__ import annotations

from typing import Any

from test_web_console import (  # noqa: F401 (fixtures)
    COMPLETED,
    REJECTED,
    SUBMITTED,
    Console,
    Inbox,
    active_id,
    by_id,
    console,
    ctrl_enter,
    driver,
    inbox,
    keys,
    marker,
    open_inbox,
    opened,
    row,
    row_ids,
    row_state,
    sign_in,
    text_of,
    wait,
    width,
)

try:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement
except ImportError:  # pragma: no cover - the fixtures skip (or fail when CI=true)
    pass


def rect(driver: WebDriver, element: WebElement) -> dict[str, Any]:
    """Where C{element} is in the viewport, and the viewport's size."""
    box: dict[str, Any] = driver.execute_script(
        "const r = arguments[0].getBoundingClientRect();"
        " return {top: r.top, bottom: r.bottom, left: r.left, right: r.right,"
        " height: r.height, innerHeight: window.innerHeight, scrollY: window.scrollY}",
        element,
    )
    return box


def current(driver: WebDriver, task_id: str) -> bool:
    return "current" in str(row(driver, task_id).get_attribute("class"))


def find(driver: WebDriver, word: str, expected: list[str]) -> None:
    """Search with the keys (/, the words, Enter, Escape) for exactly C{expected}."""
    keys(driver, "/")
    assert active_id(driver) == "search"
    keys(driver, word, Keys.ENTER)
    wait(driver, lambda d: row_ids(d) == expected)
    keys(driver, Keys.ESCAPE)


def test_pane_keys_confirm_and_next_undecided(
    driver: WebDriver, console: Console, inbox: Inbox
) -> None:
    """
    At 1440 px: Enter opens the current row beside the list (both shown, side
    by side, the row marked); j/k step through the opened ones; a asks, and
    Escape cancels with nothing stored; n writes a note, a and Ctrl+Enter
    accept with it and open the next undecided one (skipping a decided
    one); after the last, the decision stays shown; Escape goes back.
    """
    sign_in(driver, console)
    width(driver, 1440)
    word = marker()
    oldest = inbox.text(f"triage {word} oldest")
    older = inbox.text(f"triage {word} older")
    decided = inbox.text(f"triage {word} decided")
    newest = inbox.text(f"triage {word} newest")
    console.decide(decided, "reject")
    open_inbox(driver, console)
    find(driver, word, [newest, decided, older, oldest])

    keys(driver, "j")
    wait(driver, lambda d: current(d, decided))
    keys(driver, "k")
    wait(driver, lambda d: current(d, newest))
    keys(driver, Keys.ENTER)
    opened(driver, newest)
    assert by_id(driver, "list-view").is_displayed()
    assert current(driver, newest)
    listed = rect(driver, by_id(driver, "list-view"))
    pane = rect(driver, by_id(driver, "detail-view"))
    assert listed["right"] <= pane["left"], (listed, pane)
    assert pane["top"] < pane["innerHeight"] and listed["top"] < listed["innerHeight"]
    assert f"triage {word} newest" in text_of(by_id(driver, "content"))
    assert driver.save_screenshot("/tmp/triage-1440.png")

    keys(driver, "j")
    opened(driver, decided)
    wait(driver, lambda d: current(d, decided))
    keys(driver, "k")
    opened(driver, newest)

    # a asks; Escape cancels: nothing sent.
    keys(driver, "a")
    assert active_id(driver) == "note"
    assert by_id(driver, "decide-form").get_attribute("data-pending") == "accept"
    assert "Ctrl+Enter accepts" in by_id(driver, "pending").text
    keys(driver, Keys.ESCAPE)
    assert by_id(driver, "decide-form").get_attribute("data-pending") is None
    assert by_id(driver, "pending").text == ""
    assert console.task(newest)["status"]["state"] == SUBMITTED

    # n: a note; a, then Ctrl+Enter: accepted, and the next undecided opens.
    keys(driver, "n")
    assert active_id(driver) == "note"
    keys(driver, f"triaged {word}", Keys.ESCAPE, "a")
    ctrl_enter(driver)
    opened(driver, older)
    assert by_id(driver, "status").text == "Accepted; the next undecided submission is open."
    accepted = console.task(newest)
    assert accepted["status"]["state"] == COMPLETED
    assert accepted["status"]["message"]["parts"][0]["text"] == f"triaged {word}"
    wait(driver, lambda d: row_state(d, newest) == COMPLETED)
    assert current(driver, older)
    assert console.task(decided)["status"]["state"] == REJECTED

    keys(driver, "r")
    ctrl_enter(driver)
    opened(driver, oldest)
    assert console.task(older)["status"]["state"] == REJECTED
    keys(driver, "r")
    ctrl_enter(driver)
    wait(driver, lambda d: by_id(d, "decision").get_attribute("data-state") == REJECTED)
    assert by_id(driver, "status").text == "Rejected. No undecided submission follows in this list."
    assert console.task(oldest)["status"]["state"] == REJECTED

    keys(driver, Keys.ESCAPE)
    wait(driver, lambda d: not by_id(d, "detail-view").is_displayed())
    assert by_id(driver, "list-view").is_displayed()
    assert driver.switch_to.active_element == row(driver, oldest).find_element(By.CSS_SELECTOR, ".open")


def test_keys_sheet_lists_the_triage_keys(driver: WebDriver, console: Console) -> None:
    """? shows every key of the flow: j/k, o/Enter, a/r, Ctrl+Enter, n, Escape/u."""
    sign_in(driver, console)
    open_inbox(driver, console)
    keys(driver, "?")
    wait(driver, lambda d: by_id(d, "keys").get_attribute("open") is not None)
    sheet = by_id(driver, "keys")
    listed = {text_of(k) for k in sheet.find_elements(By.TAG_NAME, "kbd")}
    assert {"j", "k", "o", "Enter", "a", "r", "Ctrl", "n", "Escape", "u", "?"} <= listed
    assert "next undecided submission opens" in text_of(sheet)
    assert "confirms" in text_of(sheet)
    keys(driver, Keys.ESCAPE)
    wait(driver, lambda d: by_id(d, "keys").get_attribute("open") is None)


def test_phone_layout(driver: WebDriver, console: Console, inbox: Inbox) -> None:
    """
    At 375 px: the list on the first screen, the filters folded behind
    "Filters" (the search box shown), no bulk buttons until something is
    selected; an opened submission takes the screen, its Accept and Reject
    on it without scrolling, however long its content.
    """
    sign_in(driver, console)
    word = marker()
    long = inbox.text(f"phone {word}\n" + "\n".join(f"line {n}" for n in range(80)))
    width(driver, 375)
    try:
        open_inbox(driver, console)
        assert driver.execute_script("return document.documentElement.scrollWidth") <= 375
        toggle = by_id(driver, "filters-toggle")
        assert toggle.is_displayed() and toggle.get_attribute("aria-expanded") == "false"
        assert by_id(driver, "search").is_displayed()
        for folded in ("state", "door", "since", "until", "sort", "apply", "clear"):
            assert not by_id(driver, folded).is_displayed(), folded
        assert not by_id(driver, "bulk-accept").is_displayed()
        bulk = rect(driver, by_id(driver, "bulk"))
        assert bulk["height"] < bulk["innerHeight"] / 6, bulk
        first = rect(driver, driver.find_element(By.CSS_SELECTOR, "#inbox .row"))
        assert first["bottom"] < first["innerHeight"] / 2, first

        toggle.click()
        wait(driver, lambda d: by_id(d, "state").is_displayed())
        assert toggle.get_attribute("aria-expanded") == "true"
        toggle.click()
        wait(driver, lambda d: not by_id(d, "state").is_displayed())

        by_id(driver, "search").send_keys(word, Keys.ENTER)
        wait(driver, lambda d: row_ids(d) == [long])
        row(driver, long).find_element(By.CSS_SELECTOR, ".pick").click()
        wait(driver, lambda d: by_id(d, "bulk-reject").is_displayed())
        row(driver, long).find_element(By.CSS_SELECTOR, ".pick").click()
        wait(driver, lambda d: not by_id(d, "bulk-reject").is_displayed())

        row(driver, long).find_element(By.CSS_SELECTOR, ".open").click()
        opened(driver, long)
        assert not by_id(driver, "list-view").is_displayed()
        assert by_id(driver, "back").is_displayed()
        driver.execute_script("window.scrollTo(0, 0)")
        assert driver.execute_script("return document.documentElement.scrollHeight") > 812
        for name in ("accept", "reject"):
            box = rect(driver, by_id(driver, name))
            assert box["scrollY"] == 0
            assert 0 <= box["top"] and box["bottom"] <= box["innerHeight"], (name, box)
        assert driver.save_screenshot("/tmp/triage-375.png")
        by_id(driver, "reject").click()
        wait(driver, lambda d: by_id(d, "decision").get_attribute("data-state") == REJECTED)
        assert console.task(long)["status"]["state"] == REJECTED
        by_id(driver, "back").click()
        wait(driver, lambda d: by_id(d, "list-view").is_displayed())
    finally:
        width(driver, 1440)
