"""
The native beacon/0.1 protocol (docs/explanation/protocol-0.1.rst) over the public
resource tree: submit and status, every error code, byte-exact receipts, the
equivalence of a native and an A2A submission, and the discovery document,
schema and card round trip.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from treq.testing import StubTreq
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from beacon.config import build_config
from beacon.service import beacon_resources
from beacon.bindings.http import Container
from beacon.testing import MemoryStore

_sync = SynchronousTestCase()
PUBLIC = "https://beacon.example"
SUBMIT = PUBLIC + "/beacon/0.1/submissions"
DOCS = Path(__file__).parent.parent / "docs" / "explanation" / "protocol-0.1.rst"
STRUCTURED = {
    "from": {"name": "crawler-7", "agent": "crawler/7"},
    "subject": "Broken link report",
    "body": "The page at /docs/start links to a page that no longer exists. Grüße",
}


class Beacon:
    """Beacon's public resources (A2A and native) over a MemoryStore and a Clock."""

    def __init__(self, rate: float = 0, burst: int = 1) -> None:
        self.clock = Clock()
        self.clock.advance(1_800_000_000.25)
        self.store = MemoryStore()
        config = build_config(
            public_url=PUBLIC, file_values={"limits": {"rate": rate, "burst": burst}}
        )
        self.resources = beacon_resources(config, self.store, self.clock)
        self.root = self.resources.mount(Container())
        self.treq = StubTreq(self.root)

    def request(self, method: str, url: str, **kw: Any) -> tuple[Any, bytes]:
        """Make a request; return the response and its body."""
        response = _sync.successResultOf(self.treq.request(method, url, **kw))
        return response, _sync.successResultOf(response.content())

    def submit(self, body: Any, content_type: str = "application/json") -> tuple[Any, dict[str, Any]]:
        """POST a native submission (JSON-encoded unless already bytes)."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        response, raw = self.request(
            "POST", SUBMIT, data=data, headers={"Content-Type": content_type}
        )
        return response, json.loads(raw)


@pytest.fixture
def beacon() -> Beacon:
    """A Beacon with the rate limit off."""
    return Beacon()


def canonical(document: Any) -> bytes:
    """The documented canonical form (docs/explanation/protocol-0.1.rst, section 4)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@pytest.mark.parametrize("document", [{"text": "hello, people"}, {"message": STRUCTURED}])
def test_submit_answers_a_byte_exact_receipt(beacon: Beacon, document: dict[str, Any]) -> None:
    """A submission is answered 201 with the receipt whose sha256 the submitter can recompute."""
    response, answer = beacon.submit(document)
    assert response.code == 201
    assert set(answer) == {"receipt"}
    receipt = answer["receipt"]
    assert set(receipt) == {"id", "receivedAt", "sha256"}
    assert re.fullmatch(r"[a-z0-9]{36}", receipt["id"])
    assert receipt["receivedAt"] == "2027-01-15T08:00:00.250Z"
    assert receipt["sha256"] == hashlib.sha256(canonical(document)).hexdigest()
    assert response.headers.getRawHeaders("Location") == [f"submissions/{receipt['id']}"]
    stored = beacon.store.submissions[receipt["id"]]
    assert stored.content == canonical(document)
    assert stored.door == "native"


def test_receipt_echoes_nothing_submitted(beacon: Beacon) -> None:
    """Neither the receipt nor the status carries any submitted content."""
    secret = "a very particular sentence 7f3a"
    response, raw = beacon.request(
        "POST", SUBMIT, data=json.dumps({"text": secret}).encode(),
        headers={"Content-Type": "application/json"},
    )
    receipt_id = json.loads(raw)["receipt"]["id"]
    _, status = beacon.request("GET", f"{SUBMIT}/{receipt_id}")
    assert secret.encode() not in raw + status


def test_status_is_state_and_timestamp_only(beacon: Beacon) -> None:
    """GET of a receipt answers id, state and updatedAt, nothing else."""
    _, answer = beacon.submit({"text": "hello"})
    receipt = answer["receipt"]
    response, raw = beacon.request("GET", f"{SUBMIT}/{receipt['id']}")
    assert response.code == 200
    assert json.loads(raw) == {
        "id": receipt["id"],
        "state": "TASK_STATE_SUBMITTED",
        "updatedAt": receipt["receivedAt"],
    }
    assert response.headers.getRawHeaders("Cache-Control") == ["no-store"]


def test_status_follows_a_decision(beacon: Beacon) -> None:
    """After a decision the status shows the new state and its time."""
    _, answer = beacon.submit({"text": "hello"})
    receipt_id = answer["receipt"]["id"]
    beacon.store.append_decision(receipt_id, "TASK_STATE_REJECTED", 1_900_000_000_000, "private note")
    _, raw = beacon.request("GET", f"{SUBMIT}/{receipt_id}")
    assert json.loads(raw)["state"] == "TASK_STATE_REJECTED"
    assert json.loads(raw)["updatedAt"] == "2030-03-17T17:46:40.000Z"
    assert b"private note" not in raw


def test_native_and_a2a_submissions_are_the_same_record(beacon: Beacon) -> None:
    """The same content through either door is stored alike with the same sha256; only the door differs."""
    _, native = beacon.submit({"message": STRUCTURED})
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": "m-1",
                "role": "ROLE_USER",
                "parts": [{"data": STRUCTURED, "mediaType": "application/json"}],
            }
        },
    }
    _, raw = beacon.request(
        "POST", PUBLIC + "/a2a/v1", data=json.dumps(request).encode(), headers={"A2A-Version": "1.0", "Content-Type": "application/json"}
    )
    task = json.loads(raw)["result"]["task"]
    a2a_receipt = task["metadata"]["receipt"]
    native_receipt = native["receipt"]
    assert a2a_receipt["sha256"] == native_receipt["sha256"]
    assert set(a2a_receipt) == set(native_receipt)
    first = beacon.store.submissions[native_receipt["id"]]
    second = beacon.store.submissions[a2a_receipt["id"]]
    assert (first.kind, first.content) == (second.kind, second.content)
    assert (first.door, second.door) == ("native", "jsonrpc")
    _, a2a_status = beacon.request(
        "POST", PUBLIC + "/a2a/v1", headers={"A2A-Version": "1.0", "Content-Type": "application/json"},
        data=json.dumps({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": native_receipt["id"]}}).encode(),
    )
    assert json.loads(a2a_status)["result"]["status"]["state"] == "TASK_STATE_SUBMITTED"


def test_text_through_both_doors_hashes_alike(beacon: Beacon) -> None:
    """Native {"text"} and an A2A text message with the same text have the same sha256."""
    _, native = beacon.submit({"text": "one\ntwo"})
    request = {
        "jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "one"}, {"text": "two"}]}},
    }
    _, raw = beacon.request("POST", PUBLIC + "/a2a/v1", data=json.dumps(request).encode(), headers={"A2A-Version": "1.0", "Content-Type": "application/json"})
    assert json.loads(raw)["result"]["task"]["metadata"]["receipt"]["sha256"] == native["receipt"]["sha256"]


@pytest.mark.parametrize(
    "body, location",
    [
        ({}, "(body)"),
        ({"text": ""}, "text"),
        ({"text": 5}, "text"),
        ({"text": "a", "message": STRUCTURED}, "(body)"),
        ({"text": "a", "extra": 1}, "(body)"),
        ({"message": {"from": {"name": "x"}, "subject": "s"}}, "#/required"),
        ({"message": dict(STRUCTURED, subject="x" * 301)}, "#/properties/subject/maxLength"),
        ({"message": dict(STRUCTURED, secret_field="SECRET-VALUE")}, "#/additionalProperties"),
        (["text"], "(body)"),
    ],
)
def test_invalid_submissions_name_a_location(beacon: Beacon, body: Any, location: str) -> None:
    """An invalid body is 400 invalid_submission naming where it fails, never a value, and stores nothing."""
    response, answer = beacon.submit(body)
    assert response.code == 400
    assert answer["error"]["code"] == "invalid_submission"
    assert location in answer["error"]["message"]
    assert "SECRET-VALUE" not in json.dumps(answer)
    assert "xxxx" not in json.dumps(answer)
    assert beacon.store.submissions == {}


@pytest.mark.parametrize(
    "raw",
    [b"{not json", b'{"text": "a", "text": "b"}', b'{"text": NaN}', b"\xff\xfe", b'{"text": "\\ud800"}'],
)
def test_invalid_json_is_400(beacon: Beacon, raw: bytes) -> None:
    """A body that is not strict UTF-8 JSON is 400 invalid_json."""
    response, answer = beacon.submit(raw)
    assert response.code == 400
    assert answer["error"]["code"] == "invalid_json"


@pytest.mark.parametrize(
    "content_type, accepted",
    [
        ("application/json", True),
        ("application/json; charset=utf-8", True),
        ("Application/JSON; charset=\"UTF-8\"", True),
        ("application/json; charset=latin-1", False),
        ("text/plain", False),
        ("application/x-www-form-urlencoded", False),
    ],
)
def test_content_type_must_be_json(beacon: Beacon, content_type: str, accepted: bool) -> None:
    """Only application/json (UTF-8) is accepted; anything else is 415."""
    response, answer = beacon.submit({"text": "hi"}, content_type)
    if accepted:
        assert response.code == 201
    else:
        assert response.code == 415
        assert answer["error"]["code"] == "unsupported_media_type"


def test_missing_content_type_is_415(beacon: Beacon) -> None:
    """A POST without Content-Type is 415."""
    response, raw = beacon.request("POST", SUBMIT, data=b'{"text":"hi"}')
    assert response.code == 415


@pytest.mark.parametrize(
    "path", ["/beacon/0.1/submissions/" + "a" * 32, "/beacon/0.1/submissions/not-an-id", "/beacon/0.1/submissions/abc/extra", "/beacon/0.2/submissions"]
)
def test_unknown_is_404(beacon: Beacon, path: str) -> None:
    """An unknown receipt id or path is 404 not_found."""
    response, raw = beacon.request("GET", PUBLIC + path)
    assert response.code == 404
    assert json.loads(raw)["error"]["code"] == "not_found"


@pytest.mark.parametrize(
    "method, path, allow",
    [
        ("GET", "/beacon/0.1/submissions", "POST"),
        ("PUT", "/beacon/0.1/submissions", "POST"),
        ("POST", "/beacon/0.1/submissions/" + "a" * 32, "GET, HEAD"),
        ("DELETE", "/beacon/0.1/submissions/" + "a" * 32, "GET, HEAD"),
        ("POST", "/.well-known/autonomous-agent", "GET, HEAD"),
        ("POST", "/beacon/0.1/message.schema.json", "GET, HEAD"),
    ],
)
def test_wrong_method_is_405(beacon: Beacon, method: str, path: str, allow: str) -> None:
    """A method a resource does not answer is 405 method_not_allowed with Allow."""
    response, raw = beacon.request(method, PUBLIC + path)
    assert response.code == 405
    assert response.headers.getRawHeaders("Allow") == [allow]
    assert json.loads(raw)["error"]["code"] == "method_not_allowed"


def test_too_large_is_413(beacon: Beacon) -> None:
    """A body one byte over the cap is 413 too_large; one at the cap is read."""
    base = b'{"text":"' + b"a" * 100 + b'"}'
    at_cap = base + b" " * (65536 - len(base))
    response, _ = beacon.submit(at_cap)
    assert response.code == 201
    response, answer = beacon.submit(at_cap + b" ")
    assert response.code == 413
    assert answer["error"]["code"] == "too_large"


def test_rate_limit_is_shared_with_a2a() -> None:
    """Native submissions, status reads and A2A calls from one source draw on one bucket."""
    beacon = Beacon(rate=1, burst=3)
    response, answer = beacon.submit({"text": "one"})
    assert response.code == 201
    beacon.request("GET", f"{SUBMIT}/{answer['receipt']['id']}")
    beacon.request("POST", PUBLIC + "/a2a/v1", data=b"{}", headers={"A2A-Version": "1.0", "Content-Type": "application/json"})
    response, answer = beacon.submit({"text": "four"})
    assert response.code == 429
    assert answer["error"]["code"] == "rate_limited"
    assert response.headers.getRawHeaders("Retry-After") == ["1"]
    response, raw = beacon.request("GET", PUBLIC + "/.well-known/autonomous-agent")
    assert response.code == 200


def test_store_failure_is_503_without_receipt(beacon: Beacon, logged_events: Any) -> None:
    """When the store cannot commit, the answer is 503 unavailable, no receipt, nothing stored."""
    beacon.store.fail_appends = True
    response, answer = beacon.submit({"text": "hello"})
    assert response.code == 503
    assert answer["error"]["code"] == "unavailable"
    assert response.headers.getRawHeaders("Retry-After")
    assert "receipt" not in answer
    assert beacon.store.submissions == {}
    assert logged_events.named("intake.store_failed")


def test_discovery_document_links_everything(beacon: Beacon) -> None:
    """The discovery document names the policy and absolute URLs that all resolve."""
    response, raw = beacon.request("GET", PUBLIC + "/.well-known/autonomous-agent")
    assert response.code == 200
    assert response.headers.getRawHeaders("Cache-Control") == ["public, max-age=300"]
    assert response.headers.getRawHeaders("ETag")
    document = json.loads(raw)
    assert document["protocol"] == "beacon/0.1"
    policy = document["policy"]
    assert policy["storesForHumanReview"] is True
    assert policy["initiatesContact"] is False
    assert policy["resolvesSubmittedUrls"] is False
    assert policy["echoesContent"] is False
    assert policy["limits"] == {"maxBodyBytes": 65536, "ratePerSecond": 0.0, "burst": 1}
    endpoints = document["endpoints"]
    assert endpoints == {
        "submit": SUBMIT,
        "status": SUBMIT + "/{id}",
        "schema": PUBLIC + "/beacon/0.1/message.schema.json",
        "a2aAgentCard": PUBLIC + "/.well-known/agent-card.json",
    }
    card_response, card_raw = beacon.request("GET", endpoints["a2aAgentCard"])
    card = json.loads(card_raw)
    links = [e["params"]["href"] for e in card["capabilities"]["extensions"]]
    assert PUBLIC + "/.well-known/autonomous-agent" in links
    response, answer = beacon.submit({"text": "via discovery"})
    status_response, _ = beacon.request("GET", endpoints["status"].replace("{id}", answer["receipt"]["id"]))
    assert status_response.code == 200


def documented_examples() -> list[dict[str, Any]]:
    """The structured submissions shown in docs/explanation/protocol-0.1.rst (its C{code-block:: json} blocks)."""
    blocks = re.findall(r"^\.\. code-block:: json\n\n((?:   .*\n|\n)+)", DOCS.read_text(), re.M)
    documents = [json.loads(block) for block in blocks]
    return [d["message"] for d in documents if isinstance(d.get("message"), dict)]


def test_served_schema_validates_the_documented_examples(beacon: Beacon) -> None:
    """The schema served at its URL is valid and accepts every documented example."""
    response, raw = beacon.request("GET", PUBLIC + "/beacon/0.1/message.schema.json")
    assert response.code == 200
    assert response.headers.getRawHeaders("ETag")
    schema = json.loads(raw)
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    examples = documented_examples() + schema["examples"]
    assert len(examples) >= 3
    for example in examples:
        assert list(validator.iter_errors(example)) == []
        response, _ = beacon.submit({"message": example})
        assert response.code == 201


def test_documented_hash_example_holds() -> None:
    """The canonical bytes the document gives for {"text": "hello"} are what Beacon hashes."""
    assert canonical({"text": "hello"}) == b'{"text":"hello"}'
    assert "``{\"text\":\"hello\"}``" in DOCS.read_text()


def test_discovery_revalidates_with_304(beacon: Beacon) -> None:
    """The discovery document answers 304 to a matching If-None-Match."""
    response, _ = beacon.request("GET", PUBLIC + "/.well-known/autonomous-agent")
    etag = response.headers.getRawHeaders("ETag")[0]
    again, body = beacon.request(
        "GET", PUBLIC + "/.well-known/autonomous-agent", headers={"If-None-Match": etag}
    )
    assert again.code == 304
    assert body == b""
