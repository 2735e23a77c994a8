"""
The web console's rows, filters and bulk dialog (issue 42) in a real
browser, as C{tests/test_web_console.py} drives it (its Beacon, console and
Chromium, one each for this module; its helpers): a row says who a
structured submission claims to be from and what about, a text one its
first line and the rest; the filters offer Beacon's own lists; the bulk
dialog counts only the undecided.

Every wait is a bounded WebDriverWait; nothing sleeps. Without Chromium,
its driver or selenium the module is skipped, or fails when C{CI=true}.
"""

from __future__ import annotations

from typing import Any

from beacon.protocol import DOORS
from test_web_console import (  # noqa: F401 (fixtures)
    COMPLETED,
    REJECTED,
    SUBMITTED,
    TITLE,
    Console,
    Inbox,
    by_id,
    console,
    driver,
    inbox,
    marker,
    open_inbox,
    row,
    row_state,
    sign_in,
    screenshot,
    search,
    text_of,
    wait,
    width,
)

try:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import Select
except ImportError:  # pragma: no cover - the fixtures skip (or fail when CI=true)
    pass


def line(driver: WebDriver, task_id: str, css: str) -> str | None:
    """The text of a row's part (C{.subject}, C{.from}, C{.preview}), or None without one."""
    found = row(driver, task_id).find_elements(By.CSS_SELECTOR, css)
    return text_of(found[0]) if found else None


def test_rows_say_who_and_what(driver: WebDriver, console: Console, inbox: Inbox) -> None:
    """
    A structured row: its subject as the heading, then the name and
    operator of its C{from}, marked as the sender's claim (Beacon records
    no credential's name with a submission). A text row: its first line,
    then the rest. Hostile text in any of them stays text.
    """
    sign_in(driver, console)
    word = marker()
    ada = inbox.data(
        {
            "from": {"name": "Ada", "agent": "ada-assistant/2.1", "operator": "Example Lab"},
            "subject": f"Dataset licence question {word}",
            "body": "Could the maintainers confirm the licence?",
        }
    )
    crawler = inbox.data(
        {"from": {"name": "crawler-7"}, "subject": f"Broken link report {word}", "body": "404"}
    )
    text = inbox.text(f"\n  Your search page answers 500 {word}\nSeen at 09:14 UTC.\n\n  Thanks,\tSam")
    one_line = inbox.text(f"Just one line {word}")
    hostile_name = "<img src=x onerror=\"document.title='owned'\">\u202eevil"
    hostile_operator = "</span><script>document.title='owned'</script>"
    hostile = inbox.data(
        {
            "from": {"name": hostile_name, "operator": hostile_operator},
            "subject": f"<b>bold</b> {word}",
            "body": "x",
        }
    )
    hostile_text = inbox.text(f"plain {word}\n<a href='javascript:alert(1)'>click</a>\u200b")

    open_inbox(driver, console)
    search(driver, word, {ada, crawler, text, one_line, hostile, hostile_text})

    assert line(driver, ada, ".subject") == f"Dataset licence question {word}"
    assert line(driver, ada, ".from") == "claims to be Ada \u00b7 Example Lab"
    assert line(driver, ada, ".from .claim") == "claims to be"
    assert line(driver, ada, ".from .name") == "Ada"
    assert line(driver, ada, ".from .operator") == "Example Lab"
    assert line(driver, ada, ".preview") is None
    assert line(driver, crawler, ".from") == "claims to be crawler-7"
    assert line(driver, crawler, ".from .operator") is None

    assert line(driver, text, ".subject") == f"Your search page answers 500 {word}"
    assert line(driver, text, ".preview") == "Seen at 09:14 UTC. Thanks, Sam"
    assert line(driver, text, ".from") is None
    assert line(driver, one_line, ".subject") == f"Just one line {word}"
    assert line(driver, one_line, ".preview") is None

    assert line(driver, hostile, ".subject") == f"<b>bold</b> {word}"
    assert line(driver, hostile, ".from .name") == hostile_name.replace("\u202e", "\u27e8U+202E\u27e9")
    assert line(driver, hostile, ".from .operator") == hostile_operator
    assert line(driver, hostile_text, ".preview") == "<a href='javascript:alert(1)'>click</a>\u27e8U+200B\u27e9"
    page: dict[str, Any] = driver.execute_script(
        """
        const rows = document.querySelectorAll('#inbox .row');
        return {
          title: document.title,
          scripts: document.scripts.length,
          foreign: document.querySelectorAll('#inbox a, #inbox img, #inbox script, #inbox b').length,
          tags: [...new Set(Array.from(rows, (r) => Array.from(r.querySelectorAll('*'), (e) => e.tagName)).flat())].sort(),
          violations: document.documentElement.dataset.cspViolations,
        };
        """
    )
    assert page["title"] == TITLE
    assert page["scripts"] == 1
    assert page["foreign"] == 0
    assert page["tags"] == ["BUTTON", "INPUT", "SPAN", "TIME"]
    assert page["violations"] == "0"

    # The screenshots of the new rows, for a person to look at.
    for pixels in (1440, 375):
        width(driver, pixels, 620 if pixels == 1440 else None)
        driver.execute_script("window.scrollTo(0, 0)")
        assert driver.execute_script("return document.documentElement.scrollWidth") <= pixels
        screenshot(driver, f"rows-{pixels}")
    width(driver, 1440)


def options(driver: WebDriver, name: str) -> list[tuple[str, str]]:
    """A select's options, as (value, text)."""
    select = by_id(driver, name)
    return [(str(o.get_attribute("value")), text_of(o)) for o in select.find_elements(By.TAG_NAME, "option")]


def test_filters_offer_beacons_own_lists(driver: WebDriver, console: Console, inbox: Inbox) -> None:
    """
    The door filter lists every door of L{DOORS}, grpc among them, and the
    state filter the three states, as the server gives them; each filters.
    """
    sign_in(driver, console)
    word = marker()
    here = inbox.text(f"door {word}")
    open_inbox(driver, console)
    wait(driver, lambda d: by_id(d, "door").get_attribute("data-ready") == "true")
    wait(driver, lambda d: by_id(d, "state").get_attribute("data-ready") == "true")
    assert options(driver, "door") == [("", "any"), *((door, door) for door in DOORS)]
    assert "grpc" in DOORS
    assert options(driver, "state") == [
        ("", "any"), (SUBMITTED, "undecided"), (COMPLETED, "accepted"), (REJECTED, "rejected")
    ]
    search(driver, word, {here})
    Select(by_id(driver, "door")).select_by_value("grpc")
    wait(driver, lambda d: by_id(d, "empty").is_displayed())
    assert by_id(driver, "empty").text == "No submissions match."
    Select(by_id(driver, "door")).select_by_value("jsonrpc")
    wait(driver, lambda d: [r.get_attribute("data-id") for r in d.find_elements(By.CSS_SELECTOR, "#inbox .row")] == [here])
    Select(by_id(driver, "state")).select_by_value(REJECTED)
    wait(driver, lambda d: by_id(d, "empty").is_displayed())
    Select(by_id(driver, "state")).select_by_value(SUBMITTED)
    wait(driver, lambda d: row_state(d, here) == SUBMITTED)
    by_id(driver, "clear").click()
    wait(driver, lambda d: by_id(d, "door").get_attribute("value") == "" and by_id(d, "search").get_attribute("value") == "")


def test_bulk_dialog_counts_only_the_undecided(driver: WebDriver, console: Console, inbox: Inbox) -> None:
    """
    Three ticked, one of them already accepted: the dialog asks to reject 2
    undecided ones and says the decided one is left as it is; only the two
    are sent. Only decided ones ticked: nothing to confirm.
    """
    sign_in(driver, console)
    word = marker()
    ids = [inbox.text(f"bulk rows {word} {n}") for n in range(3)]
    console.decide(ids[1], "accept")
    open_inbox(driver, console)
    search(driver, word, set(ids))
    wait(driver, lambda d: row_state(d, ids[1]) == COMPLETED)
    for task_id in ids:
        row(driver, task_id).find_element(By.CSS_SELECTOR, ".pick").click()
    assert by_id(driver, "selected-count").text == "3 selected"

    dialog = by_id(driver, "confirm")
    by_id(driver, "bulk-reject").click()
    wait(driver, lambda d: dialog.get_attribute("open") is not None)
    assert by_id(driver, "confirm-title").text == "Reject 2 undecided submissions?"
    assert by_id(driver, "confirm-decided").text == "1 already decided is left as it is."
    assert by_id(driver, "confirm-ok").text == "Reject 2 submissions"
    by_id(driver, "confirm-ok").click()
    wait(driver, lambda d: dialog.get_attribute("open") is None)
    wait(driver, lambda d: by_id(d, "status").get_attribute("data-decided") == "2")
    assert by_id(driver, "status").get_attribute("data-already-decided") == "0"
    wait(driver, lambda d: [row_state(d, i) for i in ids] == [REJECTED, COMPLETED, REJECTED])
    assert console.task(ids[1])["status"]["state"] == COMPLETED

    for task_id in ids[:2]:
        row(driver, task_id).find_element(By.CSS_SELECTOR, ".pick").click()
    by_id(driver, "bulk-accept").click()
    wait(driver, lambda d: dialog.get_attribute("open") is not None)
    assert by_id(driver, "confirm-title").text == "Accept 0 undecided submissions?"
    assert by_id(driver, "confirm-decided").text == "2 already decided are left as they are."
    assert not by_id(driver, "confirm-ok").is_enabled()
    by_id(driver, "confirm-cancel").click()
    wait(driver, lambda d: dialog.get_attribute("open") is None)
    by_id(driver, "select-none").click()
