"""
The HTTP+JSON binding's own ways (beacon/bindings/_rest.py): its routes and
verbs, tenants, path members and A2A 11.5 query parameters, media types,
its google.rpc.Status errors and transport refusals (every limit crossed),
its SSE framing, and the operator doors' routes for extension methods.
What every binding answers alike (the methods' results and A2A errors) is
the behaviour suite's, which runs over this binding too
(tests/test_behaviour.py, the C{rest*} drivers).

Everything runs in process on one Clock, on the wiring makeService builds
(tests/bindings.World), over the direct channel or twisted.web alone
(C{--http-path}).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from zope.interface import implementer

from beacon.bindings.http import BeaconSite, Container, RESTResource, credential_digest
from beacon.intake import INBOX_EVENTS_EXTENSION, REVIEW_EXTENSION
from beacon.protocol import CallContext, Dispatcher, IA2AHandler, InternalError
from beacon.service import OPERATOR_TASK_VERBS
from bindings import HTTPClient, HTTPResponse, World
from websocket_support import call as rpc

ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"
A2A_DOMAIN = "a2a-protocol.org"
BEACON_DOMAIN = "beacon.unownedminds.com"
MESSAGE = {"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "Hello."}]}}


@pytest.fixture
def world() -> Iterator[World]:
    """A Beacon with every door; afterwards, every connection closed and no call left on its clock."""
    world = World()
    yield world
    world.close()
    assert world.active_calls() == []


def send(
    world: World,
    verb: str,
    path: str,
    body: Any = None,
    *,
    door: str = "public",
    headers: dict[str, str] | None = None,
    version: str | None = "1.0",
    keep: bool = False,
) -> HTTPResponse:
    """
    One HTTP request to a door of C{world} (C{public}, C{unix} or
    C{bearer}): C{body} a JSON value (sent as application/json) or raw
    bytes; the connection closed after the answer unless C{keep}.
    """
    raw = body if isinstance(body, bytes) else (b"" if body is None else json.dumps(body).encode())
    lines = [f"{verb} {path} HTTP/1.1", "Host: beacon.example"]
    fields = dict(headers or {})
    if version is not None:
        fields.setdefault("A2A-Version", version)
    if raw and not isinstance(body, bytes):
        fields.setdefault("Content-Type", "application/json")
    if door == "bearer":
        fields.setdefault("Authorization", f"Bearer {world.token}")
    lines += [f"{name}: {value}" for name, value in fields.items()]
    if verb in ("POST", "DELETE") or raw:
        lines.append(f"Content-Length: {len(raw)}")
    factory = {"public": world.public_site, "unix": world.unix_factory, "bearer": world.bearer_site}[door]
    client = HTTPClient(verb.encode("ascii"))
    connection = world.connect(factory, client, unix=door == "unix")
    connection.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + raw)
    assert len(client.responses) == 1, (client.responses, client.buffer)
    if not keep:
        connection.close()
    return client.responses[0]


def ok(response: HTTPResponse) -> Any:
    """The result of a 200 answer, after checking the binding's framing."""
    assert response.status == 200, (response.status, response.body)
    assert response.header("content-type") == "application/a2a+json"
    assert response.header("content-length") == str(len(response.body))
    return json.loads(response.body)


def status(response: HTTPResponse) -> dict[str, Any]:
    """The google.rpc.Status of an error answer, checked: its code is the HTTP status."""
    assert response.header("content-type") == "application/json", response
    document = json.loads(response.body)
    assert set(document) == {"error"}
    error: dict[str, Any] = document["error"]
    assert set(error) == {"code", "status", "message", "details"}
    assert error["code"] == response.status
    assert isinstance(error["message"], str) and error["message"]
    assert error["details"][0]["@type"] == ERROR_INFO
    return error


def reason(response: HTTPResponse) -> tuple[int, str, str, str]:
    """HTTP status, google.rpc code, ErrorInfo reason and domain of an error answer."""
    error = status(response)
    info = error["details"][0]
    return response.status, error["status"], info["reason"], info["domain"]


def submit(world: World) -> str:
    return world.submit("please review")


# The routes.


def test_the_routes_of_the_public_policy(world: World) -> None:
    """
    Every route of A2A 11.3 answers on the public interface: SendMessage
    stores and answers the receipt Task, GetTask the status, ListTasks an
    empty page; the rest as the public policy refuses them, each with its
    HTTP status and google.rpc code.
    """
    task = ok(send(world, "POST", "/a2a/rest/message:send", MESSAGE))["task"]
    assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
    assert world.store.submissions[task["id"]].door == "http+json"
    assert ok(send(world, "GET", f"/a2a/rest/tasks/{task['id']}")) == {
        "id": task["id"],
        "contextId": task["contextId"],
        "status": task["status"],
    }
    assert ok(send(world, "GET", "/a2a/rest/tasks?pageSize=7"))["pageSize"] == 7
    refusals = [
        ("POST", f"tasks/{task['id']}:cancel", None, (400, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE")),
        ("POST", f"tasks/{task['id']}:cancel", {"metadata": {"k": "v"}}, (400, "FAILED_PRECONDITION", "TASK_NOT_CANCELABLE")),
        ("POST", "tasks/nope:cancel", None, (404, "NOT_FOUND", "TASK_NOT_FOUND")),
        ("GET", "tasks/nope", None, (404, "NOT_FOUND", "TASK_NOT_FOUND")),
        ("POST", f"tasks/{task['id']}:subscribe", None, (400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION")),
        ("GET", f"tasks/{task['id']}:subscribe", None, (400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION")),
        ("POST", "message:stream", MESSAGE, (400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION")),
        (
            "POST",
            f"tasks/{task['id']}/pushNotificationConfigs",
            {"url": "https://x.example/hook"},
            (400, "FAILED_PRECONDITION", "PUSH_NOTIFICATION_NOT_SUPPORTED"),
        ),
        ("GET", f"tasks/{task['id']}/pushNotificationConfigs", None, (400, "FAILED_PRECONDITION", "PUSH_NOTIFICATION_NOT_SUPPORTED")),
        ("GET", f"tasks/{task['id']}/pushNotificationConfigs/c", None, (400, "FAILED_PRECONDITION", "PUSH_NOTIFICATION_NOT_SUPPORTED")),
        ("DELETE", f"tasks/{task['id']}/pushNotificationConfigs/c", None, (400, "FAILED_PRECONDITION", "PUSH_NOTIFICATION_NOT_SUPPORTED")),
        ("GET", "extendedAgentCard", None, (400, "FAILED_PRECONDITION", "EXTENDED_AGENT_CARD_NOT_CONFIGURED")),
        ("POST", "message:send", {**MESSAGE, "message": {**MESSAGE["message"], "taskId": "nope"}}, (404, "NOT_FOUND", "TASK_NOT_FOUND")),
        ("POST", "message:send", {"message": {"parts": []}}, (400, "INVALID_ARGUMENT", "INVALID_PARAMS")),
        ("POST", "message:send", b"{nope", (400, "INVALID_ARGUMENT", "PARSE_ERROR")),
        ("POST", "message:send", [MESSAGE], (400, "INVALID_ARGUMENT", "INVALID_REQUEST")),
    ]
    for verb, route, body, expected in refusals:
        headers = {"Content-Type": "application/json"} if isinstance(body, bytes) else None
        answered = send(world, verb, "/a2a/rest/" + route, body, headers=headers)
        assert reason(answered) == (*expected, A2A_DOMAIN), (verb, route)
    assert list(world.store.submissions) == [task["id"]]


def test_errors_carry_the_details_json_rpc_carries(world: World) -> None:
    """A google.rpc.Status's details are the JSON-RPC error's data: the ErrorInfo, then a BadRequest naming the fields."""
    answered = send(world, "POST", "/a2a/rest/message:send", {"message": {"role": "ROLE_USER"}})
    details = status(answered)["details"]
    assert details[0] == {"@type": ERROR_INFO, "reason": "INVALID_PARAMS", "domain": A2A_DOMAIN}
    assert details[1]["@type"] == BAD_REQUEST
    assert {v["field"] for v in details[1]["fieldViolations"]} == {"message.messageId", "message.parts"}
    jsonrpc = world.driver("jsonrpc").call(rpc("SendMessage", {"message": {"role": "ROLE_USER"}}))
    assert jsonrpc.response["error"]["data"] == details
    assert jsonrpc.response["error"]["message"] == status(answered)["message"]


def test_paths_no_route_has_and_verbs_a_route_lacks(world: World) -> None:
    """
    A path no route has is 404 METHOD_NOT_FOUND (as an unknown method); a
    route's other verbs are 405 with Allow, in the binding's shape; the
    interface URL itself is no route.
    """
    for path in ("/a2a/rest", "/a2a/rest/", "/a2a/rest/nope", "/a2a/rest/tasks/t/nope", "/a2a/rest/a/b/c/d/e/f"):
        assert reason(send(world, "GET", path)) == (404, "NOT_FOUND", "METHOD_NOT_FOUND", A2A_DOMAIN), path
    for verb, path, allow in [
        ("GET", "/a2a/rest/message:send", "POST"),
        ("DELETE", "/a2a/rest/tasks/t", "GET"),
        ("POST", "/a2a/rest/tasks", "GET"),
        ("GET", "/a2a/rest/tasks/t:cancel", "POST"),
        ("PUT", "/a2a/rest/tasks/t/pushNotificationConfigs", "POST, GET"),
        ("HEAD", "/a2a/rest/tasks/t", "GET"),
    ]:
        answered = send(world, verb, path)
        assert answered.status == 405, (verb, path)
        assert answered.header("allow") == allow
        if verb != "HEAD":
            assert reason(answered) == (405, "UNIMPLEMENTED", "METHOD_NOT_ALLOWED", BEACON_DOMAIN)
    assert world.store.submissions == {}


def test_a_tenant_is_read_and_ignored(world: World) -> None:
    """
    Every route is served under /{tenant}/ too; Beacon has one tenant, so
    the tenant is ignored as the request's tenant member is on JSON-RPC:
    the same answers. A route without its tenant is preferred, and a
    tenant is tried when the verb fits the tenant's route only.
    """
    task = ok(send(world, "POST", "/a2a/rest/acme/message:send", MESSAGE))["task"]
    assert task["id"] in world.store.submissions
    plain = ok(send(world, "GET", f"/a2a/rest/tasks/{task['id']}"))
    assert ok(send(world, "GET", f"/a2a/rest/acme%20corp/tasks/{task['id']}")) == plain
    assert ok(send(world, "GET", "/a2a/rest/acme/tasks")) == ok(send(world, "GET", "/a2a/rest/tasks"))
    # tasks/tasks is GetTask of the task "tasks"; a tenant called "tasks"
    # still reaches the routes whose verbs GetTask's lacks.
    assert reason(send(world, "GET", "/a2a/rest/tasks/tasks"))[2] == "TASK_NOT_FOUND"
    assert ok(send(world, "POST", "/a2a/rest/tasks/message:send", MESSAGE))["task"]["id"]
    assert reason(send(world, "GET", "/a2a/rest/acme/nope"))[1] == "NOT_FOUND"
    assert len(world.store.submissions) == 2


def test_path_members_are_percent_decoded() -> None:
    """
    A path member is percent-decoded UTF-8 (an id holding / or : travels
    escaped; a colon before a route's verb is the verb's); one that is not
    UTF-8 is 400 INVALID_PARAMS naming it.
    """
    handler = Recorder()
    world, site = handler_site(handler)
    try:
        assert ok(send_to(world, site, "GET", "/rest/tasks/a%3Ab%2Fc%C3%A9")) == {"handled": "get_task"}
        assert ok(send_to(world, site, "GET", "/rest/tasks/a:b")) == {"handled": "get_task"}
        assert ok(send_to(world, site, "POST", "/rest/tasks/a%3Acancel:cancel")) == {"handled": "cancel_task"}
        assert ok(send_to(world, site, "DELETE", "/rest/t%C3%A9n/tasks/t%2F1/pushNotificationConfigs/c%3A1")) == {}
        assert [(name, request) for name, _, request in handler.calls] == [
            ("get_task", ("a:b/cé", None, "")),
            ("get_task", ("a:b", None, "")),
            ("cancel_task", ("a:cancel", None, "")),
            ("delete_push_config", ("t/1", "c:1", "tén")),
        ]
        refused = send_to(world, site, "GET", "/rest/tasks/%FF")
        assert reason(refused) == (400, "INVALID_ARGUMENT", "INVALID_PARAMS", A2A_DOMAIN)
        assert status(refused)["details"][1]["fieldViolations"][0]["field"] == "id"
    finally:
        world.close()


def test_query_parameters(world: World) -> None:
    """
    A GET's members come as A2A 11.5 query parameters: camelCase or
    snake_case names, decimal numbers, true/false, enum names, RFC 3339
    timestamps; A2A-Version there is the service parameter, no member; a
    member named twice, or one not of its type, is 400 naming it.
    """
    first, second = submit(world), submit(world)
    world.store.append_decision(first, "TASK_STATE_COMPLETED", int(world.clock.seconds() * 1000), None)
    page = ok(
        send(
            world,
            "GET",
            "/a2a/rest/tasks?status=TASK_STATE_SUBMITTED&page_size=5&historyLength=0"
            "&includeArtifacts=true&statusTimestampAfter=2027-01-15T08%3A00%3A00Z&A2A-Version=1.0",
            door="unix",
        )
    )
    assert [t["id"] for t in page["tasks"]] == [second]
    assert page["pageSize"] == 5
    assert "history" not in page["tasks"][0]
    task = ok(send(world, "GET", f"/a2a/rest/tasks/{first}?historyLength=1", door="unix"))
    assert len(task["history"]) == 1
    for query, field in [
        ("pageSize=5&pageSize=6", "pageSize"),
        ("pageSize=five", "pageSize"),
        ("includeArtifacts=yes", "includeArtifacts"),
        ("status=working", "status"),
        ("statusTimestampAfter=yesterday", "statusTimestampAfter"),
        ("contextId=a&contextId=b", "contextId"),
        ("pageSize=%FF", "pageSize"),
    ]:
        refused = send(world, "GET", "/a2a/rest/tasks?" + query, door="unix")
        assert reason(refused) == (400, "INVALID_ARGUMENT", "INVALID_PARAMS", A2A_DOMAIN), query
        assert [v["field"] for v in status(refused)["details"][1]["fieldViolations"]] == [field], query


def test_version_from_the_header_or_the_query(world: World) -> None:
    """
    A2A-Version comes as the header or, without one, the query parameter;
    without 1.0 every route is 400 VERSION_NOT_SUPPORTED and nothing runs.
    """
    assert ok(send(world, "POST", "/a2a/rest/message:send?A2A-Version=1.0", MESSAGE, version=None))
    for path, version in [
        ("/a2a/rest/message:send", None),
        ("/a2a/rest/message:send", "0.3"),
        ("/a2a/rest/message:send?A2A-Version=1.0", "2.0"),
        ("/a2a/rest/message:send?A2A-Version=0.3", None),
    ]:
        refused = send(world, "POST", path, MESSAGE, version=version)
        assert reason(refused) == (400, "FAILED_PRECONDITION", "VERSION_NOT_SUPPORTED", A2A_DOMAIN)
    assert len(world.store.submissions) == 1


# Media types.


def test_request_media_types(world: World, logged_events: Any) -> None:
    """
    A body is read as application/json or application/a2a+json (any case,
    a UTF-8 charset); anything else is 415 before it is parsed. A POST
    without a body needs no Content-Type; one with a Content-Type that is
    not JSON is refused all the same.
    """
    for media in ("application/a2a+json", "application/json", "Application/A2A+JSON; charset=utf-8"):
        answered = send(world, "POST", "/a2a/rest/message:send", MESSAGE, headers={"Content-Type": media})
        assert ok(answered)["task"]["id"]
    task_id = submit(world)
    assert reason(send(world, "POST", f"/a2a/rest/tasks/{task_id}:cancel"))[2] == "TASK_NOT_CANCELABLE"
    for media, body in [
        ("text/plain", json.dumps(MESSAGE).encode()),
        ("application/json; charset=latin-1", json.dumps(MESSAGE).encode()),
        ("application/x-www-form-urlencoded", b""),
    ]:
        refused = send(world, "POST", "/a2a/rest/message:send", body, headers={"Content-Type": media})
        assert reason(refused) == (415, "INVALID_ARGUMENT", "UNSUPPORTED_MEDIA_TYPE", BEACON_DOMAIN)
        assert "application/a2a+json" in status(refused)["message"]
    assert len(world.store.submissions) == 4


# Transport refusals: every limit crossed, in this binding's shape.


def test_a_body_over_the_cap_is_413_in_this_bindings_shape(logged_events: Any) -> None:
    """
    A declared body over [limits] max_body is refused at once (before it is
    read, before the resource: by the request line's target) with 413 and a
    google.rpc.Status TOO_LARGE, and logged; one at the cap is served. On
    JSON-RPC the same refusal keeps the transport's own shape.
    """
    world = World({"limits": {"rate": 0, "max_body": 1024}})
    try:
        at_cap = json.dumps({**MESSAGE, "metadata": {"pad": ""}}).encode()
        at_cap = at_cap.replace(b'"pad": ""', b'"pad": "' + b"x" * (1024 - len(at_cap)) + b'"')
        assert len(at_cap) == 1024
        assert ok(send(world, "POST", "/a2a/rest/message:send", at_cap, headers={"Content-Type": "application/json"}))
        over = at_cap + b" "
        refused = send(world, "POST", "/a2a/rest/message:send", over, headers={"Content-Type": "application/json"})
        assert reason(refused) == (413, "RESOURCE_EXHAUSTED", "TOO_LARGE", BEACON_DOMAIN)
        assert "1024" in status(refused)["message"]
        assert len(logged_events.named("http.too_large")) == 1
        tenant = send(world, "POST", "/a2a/rest/acme/message:send", over, headers={"Content-Type": "application/json"})
        assert reason(tenant)[2] == "TOO_LARGE"
        jsonrpc = send(world, "POST", "/a2a/v1", over, headers={"Content-Type": "application/json"})
        assert jsonrpc.status == 413
        assert json.loads(jsonrpc.body)["error"]["code"] == "too_large"
        assert len(world.store.submissions) == 1
    finally:
        world.close()
    assert world.active_calls() == []


def test_the_rate_limit_is_429_with_when_to_retry(logged_events: Any) -> None:
    """
    Over the per-source rate every route is 429 RATE_LIMITED with
    Retry-After and a RetryInfo, logged once; the bucket is the JSON-RPC
    endpoint's (one per source, whatever the binding).
    """
    world = World({"limits": {"rate": 0.001, "burst": 2}})
    try:
        assert ok(send(world, "POST", "/a2a/rest/message:send", MESSAGE))
        assert world.driver("jsonrpc").call(rpc("GetTask", {"id": "nope"})).response is not None
        for verb, path in [("GET", "/a2a/rest/tasks/nope"), ("POST", "/a2a/rest/message:send")]:
            refused = send(world, verb, path, MESSAGE if verb == "POST" else None)
            assert reason(refused) == (429, "RESOURCE_EXHAUSTED", "RATE_LIMITED", BEACON_DOMAIN)
            retry = refused.header("retry-after")
            assert retry is not None and int(retry) >= 1
            assert status(refused)["details"][1] == {"@type": RETRY_INFO, "retryDelay": f"{retry}s"}
        assert len(logged_events.named("http.rate_limited")) == 1
        assert len(world.store.submissions) == 1
    finally:
        world.close()
    assert world.active_calls() == []


def test_submitter_credentials_are_401(logged_events: Any) -> None:
    """
    With [auth], a request without a good credential is 401 UNAUTHENTICATED
    with WWW-Authenticate, logged; a good bearer token or API key is served.
    """
    world = World(
        {"auth": {"bearer_tokens": [credential_digest("tok-1")], "api_keys": [credential_digest("key-1")]}}
    )
    try:
        for headers in ({"Authorization": "Bearer tok-1"}, {"X-API-Key": "key-1"}):
            assert ok(send(world, "POST", "/a2a/rest/message:send", MESSAGE, headers=headers))
        for headers in ({}, {"Authorization": "Bearer tok-2"}, {"X-API-Key": "key-2"}):
            refused = send(world, "GET", "/a2a/rest/tasks/nope", headers=headers)
            assert reason(refused) == (401, "UNAUTHENTICATED", "UNAUTHENTICATED", BEACON_DOMAIN)
            assert (refused.header("www-authenticate") or "").startswith("Bearer")
        # One source: its first refusal logged at once, the others counted.
        assert len(logged_events.named("http.unauthenticated")) == 1
        assert len(world.store.submissions) == 2
    finally:
        world.close()
    assert world.active_calls() == []
    assert [e.get("count") for e in logged_events.named("http.unauthenticated")] == [None, 2]


def test_cors_preflight_for_a_listed_origin() -> None:
    """A preflight from a listed origin is answered 204 with the route's verbs; any other is 405."""
    world = World({"limits": {"rate": 0}, "server": {"cors_origins": ["https://app.example"]}})
    try:
        headers = {"Origin": "https://app.example", "Access-Control-Request-Method": "GET"}
        answered = send(world, "OPTIONS", "/a2a/rest/tasks/t/pushNotificationConfigs", headers=headers)
        assert answered.status == 204
        assert answered.header("access-control-allow-methods") == "POST, GET"
        assert answered.header("access-control-allow-origin") == "https://app.example"
        other = {"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"}
        assert send(world, "OPTIONS", "/a2a/rest/tasks/t", headers=other).status == 405
        served = send(world, "POST", "/a2a/rest/message:send", MESSAGE, headers={"Origin": "https://app.example"})
        assert served.header("access-control-allow-origin") == "https://app.example"
    finally:
        world.close()
    assert world.active_calls() == []


def test_the_bearer_gate_refuses_in_the_shape_of_the_binding(world: World) -> None:
    """The bearer door's 401 is a google.rpc.Status under /a2a/rest, the JSON-RPC -31401 elsewhere."""
    refused = send(world, "GET", "/a2a/rest/tasks", headers={"Authorization": "Bearer nope"}, door="bearer")
    assert reason(refused) == (401, "UNAUTHENTICATED", "UNAUTHENTICATED", BEACON_DOMAIN)
    assert (refused.header("www-authenticate") or "").startswith("Bearer")
    jsonrpc = send(world, "POST", "/", rpc("ListTasks", {}), headers={"Authorization": "Bearer nope"}, door="bearer")
    assert jsonrpc.status == 401
    assert json.loads(jsonrpc.body)["error"]["code"] == -31401


# The operator's doors: extension methods, by one generic route.


@pytest.mark.parametrize("door", ["unix", "bearer"])
def test_extension_methods_by_the_generic_route(world: World, door: str) -> None:
    """
    POST extensions/<method> runs any extension method of the operator
    policy, its params the body, for a caller that activated its
    extension (echoed); without it, the method does not exist (404
    METHOD_NOT_FOUND naming the extension). A core method is not an
    extension method; nor is anything on the public door.
    """
    task_id = submit(world)
    path = "/a2a/rest/extensions/beacon.review.Decide"
    decision = {"id": task_id, "decision": "reject", "note": "not for us"}
    refused = send(world, "POST", path, decision, door=door)
    assert reason(refused) == (404, "NOT_FOUND", "METHOD_NOT_FOUND", A2A_DOMAIN)
    assert REVIEW_EXTENSION in status(refused)["message"]
    answered = send(world, "POST", path, decision, door=door, headers={"A2A-Extensions": REVIEW_EXTENSION})
    assert answered.header("a2a-extensions") == REVIEW_EXTENSION
    assert ok(answered)["status"]["state"] == "TASK_STATE_REJECTED"
    again = send(world, "POST", path, decision, door=door, headers={"A2A-Extensions": REVIEW_EXTENSION})
    assert reason(again) == (400, "FAILED_PRECONDITION", "UNSUPPORTED_OPERATION", A2A_DOMAIN)
    assert status(again)["details"][0]["metadata"] == {"state": "TASK_STATE_REJECTED"}
    core = send(world, "POST", "/a2a/rest/extensions/GetTask", {"id": task_id}, door=door)
    assert reason(core)[2] == "METHOD_NOT_FOUND"
    public = send(world, "POST", path, decision, headers={"A2A-Extensions": REVIEW_EXTENSION})
    assert reason(public)[2] == "METHOD_NOT_FOUND"


@pytest.mark.parametrize("door", ["unix", "bearer"])
def test_decide_on_the_task_route(world: World, door: str, logged_events: Any) -> None:
    """POST tasks/{id}:decide is beacon.review.Decide with the id from the path (activated as ever), on the operator's doors only."""
    assert OPERATOR_TASK_VERBS == {"decide": "beacon.review.Decide"}
    task_id = submit(world)
    path = f"/a2a/rest/tasks/{task_id}:decide"
    assert reason(send(world, "POST", path, {"decision": "accept"}, door=door))[2] == "METHOD_NOT_FOUND"
    answered = send(
        world, "POST", path, {"decision": "accept"}, door=door, headers={"A2A-Extensions": REVIEW_EXTENSION}
    )
    assert ok(answered)["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [e["task_id"] for e in logged_events.named("review.decided")] == [task_id]
    # The public interface has no such verb: the colon is the id's, and
    # tasks/{id} is GetTask's (405, Allow: GET).
    public = send(world, "POST", path, {"decision": "accept"}, headers={"A2A-Extensions": REVIEW_EXTENSION})
    assert public.status == 405 and public.header("allow") == "GET"


def sse(response: HTTPResponse) -> list[tuple[str, Any]]:
    """The events of an SSE body so far: (event name, data), comments left out."""
    events = []
    for block in response.body.split(b"\n\n"):
        lines = block.split(b"\n")
        data = [line[6:] for line in lines if line.startswith(b"data: ")]
        if data:
            name = next((line[7:].decode() for line in lines if line.startswith(b"event: ")), "message")
            events.append((name, json.loads(data[0])))
    return events


def test_streams_are_server_sent_events_of_bare_stream_responses(world: World) -> None:
    """
    Follow (by the extension route) and SubscribeToTask (GET or POST) answer
    text/event-stream, each event a bare StreamResponse; a stream that fails
    ends with an error event holding a google.rpc.Status.
    """
    task_id = submit(world)
    headers = {"A2A-Extensions": f"{REVIEW_EXTENSION}, {INBOX_EVENTS_EXTENSION}"}
    follow = send(world, "POST", "/a2a/rest/extensions/beacon.inbox.Follow", door="unix", headers=headers, keep=True)
    assert follow.header("content-type") == "text/event-stream"
    assert follow.header("a2a-extensions") == f"{INBOX_EVENTS_EXTENSION}, {REVIEW_EXTENSION}"
    subscriptions = [
        send(world, verb, f"/a2a/rest/tasks/{task_id}:subscribe", door="unix", keep=True) for verb in ("GET", "POST")
    ]
    other = submit(world)
    for connection in world.connections:
        connection.flush()
    for subscription in subscriptions:
        assert [(name, list(data)) for name, data in sse(subscription)] == [("message", ["task"])]
    assert [data["task"]["id"] for _, data in sse(follow)] == [other]
    ok(send(world, "POST", f"/a2a/rest/tasks/{task_id}:decide", {"decision": "accept"}, door="unix", headers=headers))
    for connection in world.connections:
        connection.flush()
    for subscription in subscriptions:
        assert subscription.complete
        assert sse(subscription)[-1][1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    for stream in list(world.operator_policy._streams):
        stream.fail(InternalError("the stream broke; subscribe again"))
    for connection in world.connections:
        connection.flush()
    assert follow.complete
    name, error = sse(follow)[-1]
    assert name == "error"
    assert error == {
        "error": {
            "code": 500,
            "status": "INTERNAL",
            "message": "the stream broke; subscribe again",
            "details": [{"@type": ERROR_INFO, "reason": "INTERNAL_ERROR", "domain": A2A_DOMAIN}],
        }
    }


# A policy of its own, for what Beacon's policies never answer.


@implementer(IA2AHandler)
class Recorder:
    """A policy that records each call's request and answers C{{"handled": name}} (DeletePushConfig: nothing)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, CallContext, Any]] = []

    def _record(self, name: str, context: CallContext, request: Any) -> Any:
        fields = [getattr(request, f, None) for f in ("id", "history_length", "tenant")]
        if name.endswith("push_config"):
            fields = [request.task_id, request.id, request.tenant]
        self.calls.append((name, context, tuple(fields)))
        return None if name == "delete_push_config" else {"handled": name}

    def __getattr__(self, name: str) -> Any:
        if name in IA2AHandler.names():
            return lambda context, request: self._record(name, context, request)
        raise AttributeError(name)


def handler_site(handler: Any) -> tuple[World, BeaconSite]:
    """A RESTResource at /rest over C{handler}, on a BeaconSite of its own in a World."""
    world = World()
    root = Container()
    root.putChild(b"rest", RESTResource(Dispatcher(handler), None, clock=world.clock))
    return world, BeaconSite(root, clock=world.clock)


def send_to(world: World, site: BeaconSite, verb: str, path: str) -> HTTPResponse:
    client = HTTPClient(verb.encode("ascii"))
    connection = world.connect(site, client)
    head = f"{verb} {path} HTTP/1.1\r\nHost: x\r\nA2A-Version: 1.0\r\n"
    if verb in ("POST", "DELETE"):
        head += "Content-Length: 0\r\n"
    connection.write((head + "\r\n").encode())
    connection.close()
    (response,) = client.responses
    return response


def test_an_empty_result_is_an_empty_object() -> None:
    """A method whose result is empty (DeleteTaskPushNotificationConfig's google.protobuf.Empty) answers {}."""
    world, site = handler_site(Recorder())
    try:
        answered = send_to(world, site, "DELETE", "/rest/tasks/t/pushNotificationConfigs/c")
        assert ok(answered) == {}
    finally:
        world.close()


def test_the_binding_name_and_source_of_a_call() -> None:
    """A call over HTTP+JSON is recorded as the binding http+json from its peer; with no limits, from "local"."""
    handler = Recorder()
    world, site = handler_site(handler)
    try:
        ok(send_to(world, site, "GET", "/rest/tasks/t"))
        ((_, context, _),) = handler.calls
        assert (context.binding, context.source, context.version) == ("http+json", "local", "1.0")
    finally:
        world.close()


def test_an_unexpected_failure_discloses_nothing(logged_events: Any) -> None:
    """A policy's failure that is no A2AError is 500 INTERNAL_ERROR, logged as a2a.internal_error; no detail reaches the peer."""

    class Broken(Recorder):
        def _record(self, name: str, context: CallContext, request: Any) -> Any:
            raise RuntimeError("zq-SECRET")

    logged_events.expect_failures()
    world, site = handler_site(Broken())
    try:
        answered = send_to(world, site, "GET", "/rest/tasks/t")
        assert reason(answered) == (500, "INTERNAL", "INTERNAL_ERROR", A2A_DOMAIN)
        assert b"zq-SECRET" not in answered.body
        assert len(logged_events.named("a2a.internal_error")) == 1
    finally:
        world.close()



def test_an_answer_that_cannot_be_written_is_logged(logged_events: Any) -> None:
    """
    An HTTP+JSON answer that fails on its way out is logged as
    http.response_failed, once, and nothing else goes wrong (no unhandled
    error in a Deferred); the next request is answered.
    """

    class Unencodable(Recorder):
        def _record(self, name: str, context: CallContext, request: Any) -> Any:
            if request.id == "bad":
                return {"task": object()}
            return super()._record(name, context, request)

    logged_events.expect_failures()
    world, site = handler_site(Unencodable())
    try:
        client = HTTPClient(b"GET")
        connection = world.connect(site, client)
        connection.write(b"GET /rest/tasks/bad HTTP/1.1\r\nHost: x\r\nA2A-Version: 1.0\r\n\r\n")
        (failed,) = logged_events.failures()
        assert failed["log_format"] == "http.response_failed"
        assert failed["log_failure"].check(TypeError)
        assert ok(send_to(world, site, "GET", "/rest/tasks/t")) == {"handled": "get_task"}
    finally:
        world.close()
