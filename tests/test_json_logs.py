"""
JSON log lines for log shippers (issue 20): C{twistd --logger
beacon.logs.json} writes one JSON object per event and line on standard
output, with the event's time (RFC 3339, UTC), level, namespace, stable
name, formatted message and own fields; a failure's traceback is one string
field. Checked on events made here, and end to end on a real C{twistd -n
beacon} process.
"""

from __future__ import annotations

import io
import json
import os
import select
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from twisted.logger import FileLogObserver, Logger, LogLevel, globalLogPublisher
from twisted.python import log as legacy_log
from twisted.python.reflect import namedAny

from beacon.logs import event_name, format_json, json_file_observer
from beacon.logs import json as json_logger


def events_of(emit: Any) -> list[dict[str, Any]]:
    """The events C{emit(log)} logs."""
    seen: list[dict[str, Any]] = []
    globalLogPublisher.addObserver(seen.append)
    try:
        emit(Logger(namespace="beacon.test"))
    finally:
        globalLogPublisher.removeObserver(seen.append)
    return seen


def line_of(event: dict[str, Any]) -> dict[str, Any]:
    text = format_json(event)
    assert text is not None and text.endswith("\n") and text.count("\n") == 1
    assert text.isascii()
    parsed: dict[str, Any] = json.loads(text)
    return parsed


def test_an_event_is_one_json_line() -> None:
    """Time (RFC 3339 UTC, microseconds), level, namespace, the stable name, the message and the fields."""
    (event,) = events_of(
        lambda log: log.warn(
            "http.too_large: refused a request body over {limit} bytes from {source}",
            limit=65536,
            source="192.0.2.7",
        )
    )
    line = line_of(event)
    assert line == {
        "time": line["time"],
        "level": "warn",
        "namespace": "beacon.test",
        "event": "http.too_large",
        "message": "http.too_large: refused a request body over 65536 bytes from 192.0.2.7",
        "fields": {"limit": 65536, "source": "192.0.2.7"},
    }
    when = datetime.fromisoformat(line["time"].replace("Z", "+00:00"))
    assert line["time"].endswith("Z") and abs(when.timestamp() - event["log_time"]) < 1e-5


@pytest.mark.parametrize(
    "log_format, fields, name",
    [
        ("beacon.started: public URL {public_url}", {"public_url": "x"}, "beacon.started"),
        ("{what}.listening: {endpoint} on {address}", {"what": "http", "endpoint": "e", "address": "a"}, "http.listening"),
        ("native.submit_failed", {}, "native.submit_failed"),
        ("Starting factory {factory!r}", {"factory": 1}, None),
        ("BeaconSite starting on 8080", {}, None),
        ("{what}.listening: x", {"what": "two words"}, None),
        ("{missing}.listening: x", {}, None),
        ("note: a colon in plain words", {}, None),
    ],
)
def test_stable_names(log_format: str, fields: dict[str, Any], name: str | None) -> None:
    """The name is the format's text before ':' (fields filled in), when it is lower-case dotted words; else null."""
    assert event_name({"log_format": log_format, **fields}) == name


def test_fields_are_json_safe() -> None:
    """Values JSON cannot hold are written as their repr; non-finite floats too; nested lists and dicts stay JSON; non-ASCII is escaped."""
    marker = object()
    (event,) = events_of(
        lambda log: log.info(
            "test.values: {n}",
            n=1.5,
            nan=float("nan"),
            obj=marker,
            raw=b"\x00bytes",
            nested={"a": [1, (2, 3)], "b": None},
            text="café",
        )
    )
    fields = line_of(event)["fields"]
    assert fields == {
        "n": 1.5,
        "nan": "nan",
        "obj": repr(marker),
        "raw": repr(b"\x00bytes"),
        "nested": {"a": [1, [2, 3]], "b": None},
        "text": "café",
    }
    assert "\\u00e9" in (format_json(event) or "")


def test_a_failure_is_error_and_traceback_strings(logged_events: Any) -> None:
    """A logged failure adds its type and message, and its whole traceback as one string field (never structured)."""
    logged_events.expect_failures()

    def emit(log: Logger) -> None:
        try:
            raise ValueError("bad thing")
        except ValueError:
            log.failure("native.submit_failed", source="192.0.2.7")

    (event,) = events_of(emit)
    line = line_of(event)
    assert line["event"] == "native.submit_failed"
    assert line["level"] == "critical"
    assert line["message"] == "native.submit_failed"
    assert line["error"] == "ValueError: bad thing"
    assert isinstance(line["traceback"], str)
    assert line["traceback"].startswith("Traceback") and "bad thing" in line["traceback"]
    assert line["fields"] == {"source": "192.0.2.7"}


def test_legacy_events(logged_events: Any) -> None:
    """An event logged through twisted.python.log: its text as the message, without the legacy keys; a legacy error's failure as error and traceback."""
    logged_events.expect_failures()
    seen: list[dict[str, Any]] = []
    globalLogPublisher.addObserver(seen.append)
    try:
        legacy_log.msg("old style %d" % 7)
        try:
            1 / 0
        except ZeroDivisionError:
            legacy_log.err(None, "while testing")
    finally:
        globalLogPublisher.removeObserver(seen.append)
    message, error = (line_of(e) for e in seen)
    assert message["message"] == "old style 7" and message["fields"] == {}
    assert message["event"] is None
    assert error["error"].startswith("ZeroDivisionError") and "Traceback" in error["traceback"]
    assert "failure" not in error["fields"] and "why" not in error["fields"]


def test_an_event_without_text_writes_nothing() -> None:
    """As the text formatter: no text and no failure, no line."""
    assert format_json({"log_level": LogLevel.info, "log_time": 1.0, "log_namespace": "x"}) is None
    assert format_json({"log_format": "", "log_time": 1.0}) is None


def test_the_observer_writes_lines() -> None:
    """json_file_observer writes each event as one line; beacon.logs.json is the twistd --logger factory, on standard output."""
    out = io.StringIO()
    observer = json_file_observer(out)
    for event in events_of(lambda log: (log.info("a.one: 1"), log.info("b.two: {x}", x=2))):
        observer(event)
    assert [json.loads(line)["event"] for line in out.getvalue().splitlines()] == ["a.one", "b.two"]
    assert namedAny("beacon.logs.json") is json_logger
    made = json_logger()
    assert isinstance(made, FileLogObserver)


def test_twistd_logger_option_takes_it() -> None:
    """twistd's --logger names beacon.logs.json; Beacon's own observer then stands aside."""
    from twisted.scripts.twistd import ServerOptions

    options = ServerOptions()
    options.parseOptions(
        ["-n", "--logger", "beacon.logs.json", "beacon", "--http", "tcp:0:interface=127.0.0.1", "--operator", ""]
    )
    assert options["logger"] is json_logger


def test_twistd_writes_json_lines_end_to_end(tmp_path: Path) -> None:
    """A real `twistd -n --logger beacon.logs.json beacon`: every line on standard output is a JSON object; beacon.started and the listeners' events are named; SIGTERM stops it cleanly (store.closed)."""
    twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
    process = subprocess.Popen(
        [
            twistd, "-n", "--pidfile=", "--logger", "beacon.logs.json",
            "beacon", "--data", str(tmp_path / "data"),
            "--http", "tcp:0:interface=127.0.0.1", "--operator", "",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    assert process.stdout is not None
    received = b""
    try:
        deadline = time.monotonic() + 60
        # health.ready comes once the reactor runs its loop (its signal
        # handlers in place), after the store's first answer.
        while b'"event":"health.ready"' not in received:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([process.stdout], [], [], max(0.0, left))
            assert ready, f"not ready within 60 s: {received!r}"
            chunk = os.read(process.stdout.fileno(), 65536)
            assert chunk, f"twistd ended: {received!r}"
            received += chunk
        process.send_signal(signal.SIGTERM)
        rest, errors = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    # twistd ends by the signal it was stopped with, once shut down.
    assert process.returncode in (0, -signal.SIGTERM), errors
    lines = [json.loads(raw) for raw in (received + rest).decode("ascii").splitlines()]
    names = {line["event"] for line in lines}
    assert {"http.listening", "store.opened", "beacon.started", "health.ready", "store.closed"} <= names
    started = next(line for line in lines if line["event"] == "beacon.started")
    assert started["fields"]["public_url"].startswith("http://127.0.0.1:")
    assert all(set(line) >= {"time", "level", "namespace", "event", "message", "fields"} for line in lines)
