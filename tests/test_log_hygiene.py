"""
Log hygiene: a run through every door, with credentials, submitted content,
review notes and refusals, leaves no submitted content, credential, token or
note in any log event.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from treq.testing import StubTreq
from twisted.internet.task import Clock
from twisted.logger import formatEvent
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.resource import Resource

from beacon.bindings.admission._auth import credential_digest
from beacon.config import build_config
from beacon.intake import EXTENSION_METHODS, REVIEW_EXTENSION, OperatorPolicy
from beacon.protocol import CallContext, Dispatcher
from beacon.service import beacon_resources
from beacon.testing import MemoryStore

_sync = SynchronousTestCase()
TOKEN = "token-c0ffee-SECRET"
CONTENT = "content-5ea1ed-SECRET"
NOTE = "note-0dd-SECRET"
PUBLIC = "https://beacon.example"


def every_text(event: dict[str, Any]) -> str:
    """An event as every text it could show: formatted, and every value."""
    parts = [formatEvent(event)]
    for key, value in event.items():
        if key.startswith("log_") and key not in ("log_failure",):
            continue
        parts.append(f"{key}={value!r}")
    failure = event.get("log_failure") or event.get("failure")
    if failure is not None:
        parts.append(failure.getTraceback())
    return "\n".join(parts)


def test_no_event_carries_content_credentials_or_notes(tmp_path: Path, logged_events: Any) -> None:
    """Submissions, refusals, reads and decisions through every door log none of what was sent."""
    config = build_config(
        {
            "auth": {"bearer_tokens": [credential_digest(TOKEN)]},
            "limits": {"rate": 1, "burst": 6, "max_body": 4096},
        },
        data_dir=str(tmp_path),
        public_url=PUBLIC,
    )
    store = MemoryStore()
    clock = Clock()
    treq = StubTreq(beacon_resources(config, store, clock).mount(Resource()))
    good = {"Authorization": f"Bearer {TOKEN}", "A2A-Version": "1.0", "Content-Type": "application/json"}
    bad = dict(good, Authorization=f"Bearer {TOKEN}-wrong")

    def post(path: str, body: bytes, headers: dict[str, str]) -> Any:
        response = _sync.successResultOf(treq.post(PUBLIC + path, data=body, headers=headers))
        _sync.successResultOf(response.content())
        return response

    send = {
        "jsonrpc": "2.0",
        "id": CONTENT[:20],
        "method": "SendMessage",
        "params": {"message": {"messageId": CONTENT, "role": "ROLE_USER", "parts": [{"text": CONTENT}]}},
    }
    codes = [
        post("/a2a/v1", json.dumps(send).encode(), good).code,
        post("/beacon/0.1/submissions", json.dumps({"text": CONTENT}).encode(), good).code,
        post("/a2a/v1", json.dumps(send).encode(), bad).code,
        post("/beacon/0.1/submissions", json.dumps({"text": CONTENT, "x": CONTENT}).encode(), good).code,
        post("/a2a/v1", (CONTENT * 400).encode(), good).code,
        post("/a2a/v1", b"{" + CONTENT.encode(), good).code,
        post("/a2a/v1", json.dumps(send).encode(), good).code,
        post("/a2a/v1", json.dumps(send).encode(), good).code,
    ]
    assert codes == [200, 201, 401, 400, 413, 200, 429, 429]

    store.fail_appends = True
    clock.advance(10)
    post("/beacon/0.1/submissions", json.dumps({"text": CONTENT}).encode(), good)
    store.fail_appends = False

    operator = Dispatcher(OperatorPolicy(store, clock), EXTENSION_METHODS)
    context = CallContext("operator", "uid:0", "1.0", frozenset({REVIEW_EXTENSION}))
    task_id = next(iter(store.submissions))
    for decision in ("reject", "accept"):
        request = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "beacon.review.Decide",
            "params": {"id": task_id, "decision": decision, "note": NOTE},
        }
        _sync.successResultOf(operator.dispatch(json.dumps(request).encode(), context))

    names = {str(e.get("log_format", "")).split(":", 1)[0] for e in logged_events.events}
    assert {"intake.stored", "http.too_large", "http.rate_limited", "intake.store_failed", "review.decided"} <= names
    for event in logged_events.events:
        text = every_text(event)
        for secret in (TOKEN, CONTENT, NOTE):
            assert secret not in text, (secret, text)
