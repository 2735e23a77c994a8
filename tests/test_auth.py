"""
Submitter authentication (the WebSocket binding's §6,
https://a2a-rust.com/bindings/websocket/v1, as Beacon applies it to HTTP too) on Beacon's HTTP doors: credentials
configured as SHA-256 digests, checked in constant time; HTTP 401 with
WWW-Authenticate and the JSON refusal body on the JSON-RPC and native doors;
declared on the public card only when enabled. (The WebSocket binding's
UNAUTHENTICATED frame is in C{test_websocket.py}.)
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest
from treq.testing import StubTreq
from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.resource import Resource

from beacon.bindings.admission._auth import SubmitterAuth, bearer_token, credential_digest
from beacon.config import ConfigError, build_config
from beacon.intake import CardText, public_card
from beacon.service import beacon_resources
from beacon.testing import MemoryStore

_sync = SynchronousTestCase()
TOKEN = "submitter-token-1"
API_KEY = "submitter-key-1"
BOTH = SubmitterAuth(
    api_keys=(credential_digest(API_KEY),), bearer_tokens=(credential_digest(TOKEN),)
)


def test_digest_is_what_sha256sum_prints() -> None:
    """The configured form of a credential is the hex SHA-256 that `printf %s "$TOKEN" | sha256sum` prints."""
    printed = subprocess.run(
        ["sha256sum"], input=TOKEN.encode(), capture_output=True, check=True
    ).stdout.split()[0].decode()
    assert credential_digest(TOKEN) == printed == hashlib.sha256(TOKEN.encode()).hexdigest()


def test_disabled_by_default_admits_everything() -> None:
    """With no credential configured every request is admitted."""
    auth = SubmitterAuth()
    assert not auth.enabled
    assert auth.admits(None, None)
    assert SubmitterAuth.of(build_config().auth) == auth


@pytest.mark.parametrize(
    "authorization, api_key, admitted",
    [
        ("Bearer " + TOKEN, None, True),
        ("bearer " + TOKEN, None, True),
        ("BEARER  " + TOKEN + " ", None, True),
        (None, API_KEY, True),
        (None, " " + API_KEY, True),
        ("Bearer wrong", API_KEY, True),
        ("Bearer wrong", None, False),
        ("Basic " + TOKEN, None, False),
        ("Bearer", None, False),
        (TOKEN, None, False),
        (None, TOKEN, False),
        (None, None, False),
        ("Bearer " + API_KEY, None, False),
    ],
)
def test_admits(authorization: str | None, api_key: str | None, admitted: bool) -> None:
    """A bearer token or an API key admits a request only when it matches a digest of its own kind."""
    assert BOTH.admits(authorization, api_key) is admitted


def test_bearer_token_parsing() -> None:
    """Only the Bearer scheme yields a token."""
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("Basic abc") is None
    assert bearer_token("") is None


def test_digests_are_normalised_and_checked() -> None:
    """Digests are lower-cased; anything that is not 64 hex digits is refused."""
    digest = credential_digest(TOKEN)
    assert SubmitterAuth(bearer_tokens=(digest.upper(),)).bearer_tokens == (digest,)
    with pytest.raises(ValueError):
        SubmitterAuth(bearer_tokens=(TOKEN,))
    with pytest.raises(ConfigError, match="sha256sum"):
        build_config({"auth": {"api_keys": [API_KEY]}})


def test_challenges_name_the_configured_kinds() -> None:
    """WWW-Authenticate names Bearer and/or the API key header, as configured."""
    assert SubmitterAuth(bearer_tokens=(credential_digest("x"),)).challenge() == 'Bearer realm="beacon"'
    assert (
        SubmitterAuth(api_keys=(credential_digest("x"),)).challenge()
        == 'ApiKey realm="beacon", header="X-API-Key"'
    )


class Doors:
    """Beacon's public resources with [auth] configured, through StubTreq."""

    def __init__(self, tmp_path: Path, auth: dict[str, Any] | None) -> None:
        values = {"auth": auth} if auth is not None else {}
        config = build_config(values, data_dir=str(tmp_path), public_url="https://beacon.example")
        self.store = MemoryStore()
        self.resources = beacon_resources(config, self.store, Clock())
        self.treq = StubTreq(self.resources.mount(Resource()))

    def request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[Any, Any]:
        """One request; the response and its decoded JSON body (or None)."""
        all_headers = {"Content-Type": "application/json", "A2A-Version": "1.0"}
        all_headers.update(headers or {})
        data = json.dumps(body).encode() if body is not None else None
        response = _sync.successResultOf(
            self.treq.request(method, "https://beacon.example" + path, data=data, headers=all_headers)
        )
        content = _sync.successResultOf(response.content())
        return response, json.loads(content) if content else None

    def close(self) -> None:
        """Stop the doors' throttled refusal lines (their timer)."""
        self.resources.websocket.limits.refusals.stop_logging()


SEND = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "SendMessage",
    "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
}


@pytest.fixture
def doors(tmp_path: Path) -> Iterator[Doors]:
    """Doors that require a bearer token or an API key."""
    opened = Doors(
        tmp_path,
        {"bearer_tokens": [credential_digest(TOKEN)], "api_keys": [credential_digest(API_KEY)]},
    )
    yield opened
    opened.close()


@pytest.mark.parametrize(
    "method, path, body",
    [
        ("POST", "/a2a/v1", SEND),
        ("POST", "/beacon/0.1/submissions", {"text": "hi"}),
        ("GET", "/beacon/0.1/submissions/abc", None),
    ],
)
def test_http_doors_answer_401(doors: Doors, method: str, path: str, body: Any) -> None:
    """Without a good credential the JSON-RPC and native doors answer 401 with WWW-Authenticate and the JSON refusal body."""
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"X-API-Key": "wrong"}):
        response, answer = doors.request(method, path, body, headers)
        assert response.code == 401
        assert response.headers.getRawHeaders("WWW-Authenticate") == [
            'Bearer realm="beacon", ApiKey realm="beacon", header="X-API-Key"'
        ]
        assert response.headers.getRawHeaders("Content-Type") == ["application/json"]
        assert answer["error"]["code"] == "unauthenticated"
        assert answer["error"]["message"]
    assert doors.store.submissions == {}


@pytest.mark.parametrize(
    "headers", [{"Authorization": "Bearer " + TOKEN}, {"X-API-Key": API_KEY}]
)
def test_http_doors_admit_a_credential(doors: Doors, headers: dict[str, str]) -> None:
    """With either credential the JSON-RPC and native doors serve as usual."""
    response, answer = doors.request("POST", "/a2a/v1", SEND, headers)
    assert response.code == 200
    assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_SUBMITTED"
    response, answer = doors.request("POST", "/beacon/0.1/submissions", {"text": "hi"}, headers)
    assert response.code == 201


def test_discovery_stays_open(doors: Doors) -> None:
    """The card and the discovery documents need no credential: they say how to get in."""
    for path in ("/.well-known/agent-card.json", "/.well-known/autonomous-agent", "/beacon/0.1/message.schema.json"):
        response, _ = doors.request("GET", path)
        assert response.code == 200, path


def test_card_declares_the_schemes_when_enabled(doors: Doors) -> None:
    """With [auth] the public card declares an apiKey and a bearer scheme, either of which suffices."""
    _, card = doors.request("GET", "/.well-known/agent-card.json")
    assert card["securitySchemes"] == {
        "apiKey": {
            "apiKeySecurityScheme": {
                "description": "A submitter API key issued by this Beacon's operator.",
                "location": "header",
                "name": "X-API-Key",
            }
        },
        "bearer": {
            "httpAuthSecurityScheme": {
                "description": "A submitter token issued by this Beacon's operator.",
                "scheme": "Bearer",
            }
        },
    }
    assert card["securityRequirements"] == [
        {"schemes": {"apiKey": {"list": []}}},
        {"schemes": {"bearer": {"list": []}}},
    ]


def test_card_declares_only_configured_kinds(tmp_path: Path) -> None:
    """Bearer tokens alone declare only the bearer scheme."""
    doors = Doors(tmp_path, {"bearer_tokens": [credential_digest(TOKEN)]})
    _, card = doors.request("GET", "/.well-known/agent-card.json")
    assert list(card["securitySchemes"]) == ["bearer"]
    assert card["securityRequirements"] == [{"schemes": {"bearer": {"list": []}}}]


def test_disabled_auth_declares_nothing_and_refuses_nothing(tmp_path: Path) -> None:
    """Without [auth] the card has no security fields and requests need no credential."""
    doors = Doors(tmp_path, None)
    _, card = doors.request("GET", "/.well-known/agent-card.json")
    assert "securitySchemes" not in card and "securityRequirements" not in card
    assert "securitySchemes" not in public_card(CardText(), "https://beacon.example")
    response, _ = doors.request("POST", "/a2a/v1", SEND)
    assert response.code == 200


def test_rate_limit_comes_before_the_credential(tmp_path: Path) -> None:
    """Guessing credentials is rate limited: over the rate a request is 429 whatever it carries."""
    config = build_config(
        {"auth": {"bearer_tokens": [credential_digest(TOKEN)]}, "limits": {"rate": 1, "burst": 1}},
        data_dir=str(tmp_path),
        public_url="https://beacon.example",
    )
    resources = beacon_resources(config, MemoryStore(), Clock())
    treq = StubTreq(resources.mount(Resource()))
    codes = []
    for _ in range(2):
        response = _sync.successResultOf(
            treq.post("https://beacon.example/a2a/v1", data=json.dumps(SEND).encode(), headers={"A2A-Version": "1.0", "Content-Type": "application/json"})
        )
        codes.append(response.code)
    assert codes == [401, 429]
