"""
The gRPC door cannot be held shut: Beacon's gRPC door on 127.0.0.1:0 (its
wait for request messages timed on a L{Clock}), driven by grpcio's own
client. Calls whose request message never comes are refused from their
metadata when they carry no credential, capped per source, and cancelled
once they have waited C{message_timeout}; meanwhile another source's
authenticated calls are answered.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
import pytest_twisted
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from twisted.internet import reactor
from twisted.internet.defer import Deferred, TimeoutError as TimedOut
from twisted.internet.task import Clock, deferLater
from twisted.internet.threads import deferToThread

from beacon.bindings.grpc import (
    EXPIRY_INTERVAL,
    GRPCCalls,
    GRPCServer,
)
from beacon.bindings.http import SubmitterAuth, TransportLimits, credential_digest
from beacon.bindings.admission import RateLimiter, SourceResolver
from beacon.config import build_config
from beacon.proto import a2a_pb2, a2a_pb2_grpc
from beacon.protocol import Dispatcher
from beacon.service import GRPCService, makeService

TOKEN = "door-token"
GOOD = (("a2a-version", "1.0"), ("authorization", f"Bearer {TOKEN}"))
#: The honest caller comes through a trusted proxy as another source.
OTHER = GOOD + (("x-forwarded-for", "203.0.113.9"),)
SEND_PATH = "/lf.a2a.v1.A2AService/SendMessage"
TIMEOUT = 30.0


class TaskPolicy:
    """Answers GetTask with a task at once."""

    def get_task(self, context: Any, request: Any) -> Any:
        return {"id": request.id, "status": {"state": "TASK_STATE_SUBMITTED"}}


class Door:
    """A gRPC door over L{TaskPolicy}, its message wait timed on C{clock}."""

    def __init__(self, clock: Clock, **options: Any) -> None:
        limits = TransportLimits(
            max_body=65536,
            rate=RateLimiter(0, 1, reactor),
            sources=SourceResolver([ipaddress.ip_network("127.0.0.1/32")]),
            auth=SubmitterAuth(bearer_tokens=(credential_digest(TOKEN),)),
        )
        self.calls = GRPCCalls(Dispatcher(TaskPolicy()), limits)
        self.clock = clock
        self.server = GRPCServer(
            self.calls,
            reactor,
            ["127.0.0.1:0"],
            max_receive=66560,
            grace=0,
            clock=clock,
            message_timeout=TIMEOUT,
            **options,
        )
        self.server.start()
        self.target = self.server.urls[0]
        self.channel = grpc.insecure_channel(self.target)
        self.released = threading.Event()
        self.stalled: list[grpc.Future] = []

    def stall(self, count: int, metadata: Any = None) -> None:
        """Open C{count} SendMessage calls on one connection whose request message never comes."""
        call = self.channel.stream_unary(
            SEND_PATH,
            request_serializer=a2a_pb2.SendMessageRequest.SerializeToString,
            response_deserializer=a2a_pb2.SendMessageResponse.FromString,
        )
        released = self.released

        def never() -> Iterator[Any]:
            released.wait(60)
            return
            yield  # a generator that sends nothing

        for _ in range(count):
            self.stalled.append(call.future(never(), metadata=metadata))

    def get(self, metadata: Any = OTHER) -> Deferred[Any]:
        """GetTask from another source, on a channel of its own: its answer or its error code."""

        def call() -> Any:
            with grpc.insecure_channel(self.target) as channel:
                stub = a2a_pb2_grpc.A2AServiceStub(channel)
                try:
                    return stub.GetTask(a2a_pb2.GetTaskRequest(id="t-1"), metadata=metadata, timeout=10)
                except grpc.RpcError as error:
                    return error.code()

        return deferToThread(call)

    def close(self) -> Deferred[None]:
        self.released.set()
        for future in self.stalled:
            future.cancel()
        self.channel.close()
        return self.server.stop()


@pytest.fixture
def door() -> Iterator[Any]:
    made: list[Door] = []

    def make(**options: Any) -> Door:
        opened = Door(Clock(), **options)
        made.append(opened)
        return opened

    yield make
    for opened in made:
        pytest_twisted.blockon(opened.close())


def finished(futures: list[grpc.Future], what: str, count: int | None = None) -> Deferred[None]:
    """
    Fire once C{count} of C{futures} (all of them by default) are done:
    each future's done callback, run on grpcio's thread, is carried to the
    reactor. The 30 s are a safety net, not a wait.
    """
    wanted = len(futures) if count is None else count
    done: Deferred[None] = Deferred()
    if not wanted:
        done.callback(None)
        return done
    seen = [0]

    def one() -> None:
        seen[0] += 1
        if seen[0] == wanted:
            done.callback(None)

    for future in futures:
        future.add_done_callback(lambda _: reactor.callFromThread(one))

    def never(failure: Any) -> None:
        failure.trap(TimedOut)
        raise AssertionError(f"never: {what}")

    return done.addTimeout(30, reactor).addErrback(never)


async def settled(condition: Any, what: str) -> None:
    """
    Wait for C{condition()}, looking every 10 ms, at most 30 s: only for
    the door's state that no event of the client's tells.
    """
    for _ in range(3000):
        if condition():
            return
        await deferLater(reactor, 0.01, lambda: None)
    raise AssertionError(f"never: {what}")


def error_of(future: grpc.Future) -> tuple[grpc.StatusCode, str]:
    """A finished call's status code and ErrorInfo reason."""
    error = future.exception()
    assert error is not None
    status = rpc_status.from_call(error)
    reason = ""
    for detail in status.details if status is not None else ():
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason = info.reason
    return error.code(), reason


@pytest.mark.parametrize("count", [16, 64, 256])
@pytest_twisted.ensureDeferred
async def test_stalled_calls_without_a_credential_are_refused_at_once(door: Any, count: int) -> None:
    """
    Calls without metadata whose message never comes are refused
    UNAUTHENTICATED from their metadata: none waits, and another source's
    authenticated calls are answered throughout.
    """
    opened = door()
    opened.stall(count)
    await finished(opened.stalled, "every stalled call refused")
    assert {error_of(f) for f in opened.stalled} == {
        (grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED")
    }
    assert opened.server.waiting == 0
    for _ in range(5):
        answer = await opened.get()
        assert answer.id == "t-1"
    assert opened.calls.refusals["unauthenticated"] == count


@pytest.mark.parametrize("count", [16, 64, 256])
@pytest_twisted.ensureDeferred
async def test_stalled_calls_with_a_credential_are_capped_then_cancelled(door: Any, count: int) -> None:
    """
    A source's authenticated calls whose message never comes: at most 16
    wait, the rest are refused RESOURCE_EXHAUSTED (IN_FLIGHT_LIMIT);
    another source is answered meanwhile; once C{message_timeout} has
    passed on the clock, the waiting ones are cancelled, and the source
    may call again.
    """
    opened = door(max_calls_per_source=16)
    opened.stall(count, metadata=GOOD)
    # A call past the cap is refused only once 16 are waiting; with no call
    # past it, nothing the client sees says when the 16th has come.
    await finished(opened.stalled, "all but 16 calls refused", count - 16)
    await settled(lambda: opened.server.waiting == 16, "16 calls waiting")
    assert sum(f.done() for f in opened.stalled) == count - 16
    refused = [error_of(f) for f in opened.stalled if f.done()]
    assert set(refused) <= {(grpc.StatusCode.RESOURCE_EXHAUSTED, "IN_FLIGHT_LIMIT")}
    for _ in range(5):
        answer = await opened.get()
        assert answer.id == "t-1"
    # One look short of the bound: nothing is cancelled yet.
    opened.clock.advance(TIMEOUT - EXPIRY_INTERVAL)
    assert opened.server.waiting == 16
    opened.clock.advance(EXPIRY_INTERVAL)
    assert opened.server.waiting == 0
    await finished(opened.stalled, "every stalled call ended")
    codes = {f.exception().code() for f in opened.stalled}
    assert grpc.StatusCode.CANCELLED in codes
    assert codes <= {grpc.StatusCode.CANCELLED, grpc.StatusCode.RESOURCE_EXHAUSTED}
    assert opened.calls.refusals["request_timeout"] == 16
    assert opened.calls.refusals["in_flight_limit"] == count - 16
    # The source's calls are over: it is served again.
    answer = await opened.get(GOOD)
    assert answer.id == "t-1"


@pytest_twisted.ensureDeferred
async def test_a_call_whose_message_comes_is_not_cancelled(door: Any) -> None:
    """A call answered before the bound leaves nothing waiting, whatever the clock does after."""
    opened = door()
    answer = await opened.get(GOOD)
    assert answer.id == "t-1"
    assert opened.server.waiting == 0
    opened.clock.advance(TIMEOUT * 2)
    assert opened.calls.refusals["request_timeout"] == 0


def test_the_configuration_sets_the_door(tmp_path: Any) -> None:
    """[grpc] and [limits] reach the server makeService builds."""
    config = build_config(
        {
            "server": {"data": str(tmp_path / "data"), "http": ["tcp:0:interface=127.0.0.1"]},
            "operator": {"socket": ""},
            "limits": {"idle_timeout": 42.0, "body_timeout": 7.0},
            "grpc": {
                "listen": ["127.0.0.1:0"],
                "max_calls_per_source": 3,
                "max_connection_age": 600,
                "keepalive": 0,
            },
        }
    )
    service = makeService(config, reactor)
    server = next(s for s in service if isinstance(s, GRPCService)).server
    assert server.max_calls_per_source == 3
    assert server.message_timeout == 7.0
    assert server.max_calls == config.grpc.workers * 8
    door = server.door
    assert (door.idle_timeout, door.max_connection_age, door.keepalive) == (42.0, 600.0, None)
    assert door.max_connections == config.limits.max_connections
    assert door.max_connections_per_source == config.limits.max_connections_per_source


@pytest.mark.parametrize(
    "key, value",
    [("max_calls_per_source", -1), ("max_connection_age", 0.5), ("keepalive", -3), ("keepalive", "60")],
)
def test_door_limits_are_checked(tmp_path: Any, key: str, value: Any) -> None:
    """A door limit out of range, or of the wrong type, stops start-up with its key named."""
    from beacon.config import ConfigError

    with pytest.raises(ConfigError, match=f"\\[grpc\\] {key}"):
        build_config({"server": {"data": str(tmp_path)}, "grpc": {"listen": ["0"], key: value}})
