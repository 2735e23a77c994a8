"""
The A2A gRPC binding (§10), client side: service C{lf.a2a.v1.A2AService}
over grpcio, brought into the reactor without holding a thread per unary call.

Wire contract (what this client sends and accepts)::

    target    the interface url: host:port (plaintext, unless the client
              is given TLS credentials), http://host:port (plaintext),
              https://host[:port] (TLS, port 443 by default; the URL's
              path means nothing to gRPC and is not used)
    metadata  a2a-version: 1.0 on every call
              a2a-extensions: <uri>, <uri> when the caller asks for some
              the caller's headers, their names lower-cased
              (authorization: Bearer ..., x-api-key: ...)
    request   the call's params (the JSON-RPC params, ProtoJSON) parsed
              into the method's request message (json_format.ParseDict);
              a member the message lacks is a ClientError, nothing is sent
    answer    the response message as ProtoJSON (json_format.MessageToDict:
              camelCase, enums by name), {} for google.protobuf.Empty
    errors    a status whose grpc-status-details-bin (a google.rpc.Status)
              packs an ErrorInfo with an A2A reason (domain
              a2a-protocol.org) is the RPCError that error is on JSON-RPC
              (TASK_NOT_FOUND: -32001 ...); UNAVAILABLE is a TransportError
              (a Timeout, phase connect, when a connection attempt outlived
              the connect timeout), DEADLINE_EXCEEDED a Timeout; an answer over the client's
              limit is an InvalidResponse, a request over the server's a
              GRPCStatusError with reason TOO_LARGE; any other status a
              GRPCStatusError.

Threads and time: a unary call is made with the multi-callable's
C{.future()}; its done callback (on a gRPC thread) only hands the outcome
to the reactor with C{callFromThread}, where the call's L{Deferred} fires.
Every unary call carries gRPC's C{timeout=} (the response timeout) and is
also bounded by a L{Deadline} on the injected clock, which cancels it. A
stream's response iterator blocks, so each stream is read on a thread of
its own (daemon, at most L{MAX_STREAMS} per client at once), which hands
every event to the reactor and waits while the consumer lags (the
L{ResponseStream}'s pause), so gRPC's flow control holds the server back;
a stream has no gRPC deadline (it may last), the first-event and idle
bounds of L{ResponseStream} run on the injected clock and cancel it.

grpcio, protobuf and beacon.proto are imported only when a gRPC client is
made (L{load}): without them the other bindings work, and this one says
which extra to install.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorTime

import beacon
from beacon.interfaces import IBeaconReactor
from beacon.client._errors import (
    ClientError,
    GRPCStatusError,
    InvalidResponse,
    RPCError,
    Timeout,
    TransportError,
)
from beacon.client._stream import ResponseStream
from beacon.client._transport import Deadline
from beacon.protocol import A2A_DOMAIN, CODE_OF_REASON, ERROR_INFO_TYPE

#: What to install for this binding.
GRPC_EXTRA = "pip install 'beacon-a2a[grpc]'"
#: The one line said when grpcio (or protobuf) is missing.
GRPC_MISSING = f"the gRPC binding needs grpcio: {GRPC_EXTRA}"
#: The service every call goes to.
SERVICE = "lf.a2a.v1.A2AService"
#: The trailer carrying a google.rpc.Status.
STATUS_DETAILS = "grpc-status-details-bin"
#: How many streams one client reads at once (each on a thread of its own).
MAX_STREAMS = 16
#: How many events a stream's thread hands to the reactor before the
#: reactor has taken them.
HANDOFF_WINDOW = 16

_METADATA_KEY = re.compile(r"[0-9a-z_.-]+")
_TOO_LARGE = re.compile(r"larger than max \(([0-9]{1,12}) vs\. ([0-9]{1,12})\)")


class GRPCMissing(ClientError):
    """grpcio (or protobuf, or googleapis-common-protos) is not installed."""

    def __init__(self) -> None:
        super().__init__(GRPC_MISSING)


def load() -> SimpleNamespace:
    """
    The modules the binding uses, imported now.

    @raise GRPCMissing: One is not installed.
    """
    try:
        import grpc
        from google.protobuf import json_format, message_factory
        from google.rpc import error_details_pb2, status_pb2

        from beacon.proto import a2a_pb2
    except ImportError:
        raise GRPCMissing() from None
    # ErrorInfo and BadRequest are now in protobuf's pool: the details'
    # Any values can be read as ProtoJSON.
    return SimpleNamespace(
        grpc=grpc,
        json_format=json_format,
        message_factory=message_factory,
        status_pb2=status_pb2,
        error_details_pb2=error_details_pb2,
        service=a2a_pb2.DESCRIPTOR.services_by_name["A2AService"],
    )


@dataclass(frozen=True)
class Target:
    """Where a gRPC interface is dialled: C{host:port}, and whether over TLS."""

    target: str
    tls: bool


def target_of(url: str) -> Target | None:
    """
    The target of a gRPC interface's url (C{host:port}, C{[::1]:port},
    C{http://host:port}, C{https://host[:port]}); None when it is none of
    those.
    """
    text = url.strip()
    lowered = text.lower()
    if lowered.startswith(("http://", "https://")):
        parts = urlsplit(text)
        tls = parts.scheme.lower() == "https"
    elif "://" in text or not text:
        return None
    else:
        parts = urlsplit("//" + text)
        tls = False
        if parts.path or parts.query or parts.fragment:
            return None
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host or parts.username is not None or parts.password is not None:
        return None
    if port is None:
        if not tls:
            return None
        port = 443
    name = f"[{host}]" if ":" in host else host
    return Target(f"{name}:{port}", tls)


def metadata_of(headers: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """
    The caller's headers as gRPC metadata: names lower-cased.

    @raise ClientError: A name or a value gRPC cannot carry as text.
    """
    metadata: list[tuple[str, str]] = []
    for name, value in headers.items():
        key = name.strip().lower()
        if not _METADATA_KEY.fullmatch(key) or key.startswith("grpc-") or key.endswith("-bin"):
            raise ClientError(f"{name!r} cannot be sent as gRPC metadata")
        if not all(" " <= c <= "~" for c in value):
            raise ClientError(f"the value of {name!r} cannot be sent as gRPC metadata (printable ASCII only)")
        metadata.append((key, value))
    return tuple(metadata)


def _details(modules: SimpleNamespace, status: Any) -> list[dict[str, Any]]:
    """A google.rpc.Status's details as ProtoJSON (an unknown type: its @type alone)."""
    found: list[dict[str, Any]] = []
    for detail in status.details:
        try:
            found.append(modules.json_format.MessageToDict(detail))
        except Exception:  # noqa: BLE001 - a type this process does not know
            found.append({"@type": detail.type_url})
    return found


def _status_of(modules: SimpleNamespace, error: Any) -> Any:
    """The google.rpc.Status in an RpcError's trailers, or None."""
    for key, value in error.trailing_metadata() or ():
        if key == STATUS_DETAILS and isinstance(value, bytes):
            status = modules.status_pb2.Status()
            try:
                status.ParseFromString(value)
            except Exception:  # noqa: BLE001 - a broken trailer is no status
                return None
            return status
    return None


def _unavailable(message: str) -> str:
    """What an UNAVAILABLE status says, in a few words."""
    lowered = message.lower()
    if "connection refused" in lowered:
        return "connection refused"
    if "dns resolution failed" in lowered or "name or service not known" in lowered:
        return "no such address"
    if "handshake" in lowered or "ssl" in lowered or "tls" in lowered:
        return f"the TLS handshake failed ({message[:160]})"
    if "socket closed" in lowered or "reset" in lowered or "goaway" in lowered:
        return "the connection broke before an answer"
    return f"unavailable ({message[:160]})"


class GRPCTransport:
    """
    The gRPC binding: one channel per client (opened when the first call
    is made, closed by L{close}), one gRPC call per A2A call.
    """

    def __init__(
        self,
        reactor: IBeaconReactor,
        url: str,
        *,
        clock: IReactorTime,
        address: str,
        connect_timeout: float,
        response_timeout: float,
        idle_timeout: float,
        max_response: int,
        headers: Mapping[str, str] | None = None,
        credentials: Any = None,
        peer: str = "the agent",
    ) -> None:
        """
        @param url: The interface's url (see L{target_of}).
        @param connect_timeout: Bounds each connection attempt (gRPC's
            C{grpc.min_reconnect_backoff_ms}, its minimum connect timeout).
        @param max_response: The largest answer (or stream event) read, in
            bytes (C{grpc.max_receive_message_length}).
        @param headers: More metadata on every call (C{Authorization} ...).
        @param credentials: C{grpc.ChannelCredentials} to dial with (TLS
            whatever the url says); default: TLS with the platform's roots
            for an C{https://} url, plaintext otherwise.
        @raise GRPCMissing: grpcio is not installed.
        @raise ClientError: The url is no gRPC target, or a header cannot
            be metadata.
        """
        self._m = load()
        target = target_of(url)
        if target is None:
            raise ClientError(f"{url!r} is not a gRPC target (host:port, or an http(s) URL)")
        self._reactor = reactor
        self._clock = clock
        self.address = address
        self._connect_timeout = connect_timeout
        self._response_timeout = response_timeout
        self._idle_timeout = idle_timeout
        self._headers = metadata_of(headers or {})
        self._peer = peer
        grpc = self._m.grpc
        options = [
            ("grpc.max_receive_message_length", max_response),
            ("grpc.enable_retries", 0),
            ("grpc.min_reconnect_backoff_ms", max(1, int(connect_timeout * 1000))),
            ("grpc.primary_user_agent", f"beacon/{beacon.__version__}"),
        ]
        if credentials is None and target.tls:
            credentials = grpc.ssl_channel_credentials()
        if credentials is not None:
            self._channel = grpc.secure_channel(target.target, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(target.target, options=options)
        self._closed = False
        self._callables: dict[str, tuple[Any, Any, bool]] = {}
        #: The open streams, each with what cancels its call and wakes its thread.
        self._streams: dict[ResponseStream, Any] = {}

    # The plumbing.

    def _method(self, method: str) -> tuple[Any, Any, bool]:
        """The multi-callable of C{method}, its request class, whether it streams."""
        if method in self._callables:
            return self._callables[method]
        descriptor = self._m.service.methods_by_name.get(method)
        if descriptor is None:
            raise ClientError(f"{method} is no method of {SERVICE} (the gRPC binding has no other)")
        factory = self._m.message_factory
        request = factory.GetMessageClass(descriptor.input_type)
        response = factory.GetMessageClass(descriptor.output_type)
        path = f"/{SERVICE}/{method}"
        make = self._channel.unary_stream if descriptor.server_streaming else self._channel.unary_unary
        found = (
            make(path, request_serializer=request.SerializeToString, response_deserializer=response.FromString),
            request,
            bool(descriptor.server_streaming),
        )
        self._callables[method] = found
        return found

    def _request(self, method: str, kind: Any, params: Any) -> Any:
        try:
            return self._m.json_format.ParseDict(params if isinstance(params, dict) else {}, kind())
        except Exception as e:  # noqa: BLE001 - ParseError, and what it wraps
            raise ClientError(f"{method}: the request cannot be sent over gRPC: {e}") from None

    def _metadata(self, extensions: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
        metadata = [("a2a-version", "1.0"), *self._headers]
        if extensions:
            metadata.append(("a2a-extensions", ", ".join(extensions)))
        return tuple(metadata)

    def _timeout(self) -> Timeout:
        return Timeout(self.address, self._response_timeout, "answer", self._peer)

    def error(self, error: Any, sent: int = -1) -> ClientError:
        """
        The L{ClientError} a failed call's C{grpc.RpcError} stands for (see
        the wire contract above); C{sent}: the request's size in bytes.
        """
        grpc = self._m.grpc
        try:
            code = error.code()
            message = error.details() or ""
        except Exception:  # noqa: BLE001 - an RpcError that is no Call
            return TransportError(self.address, f"the call failed ({type(error).__name__})", self._peer)
        name = code.name if code is not None else "UNKNOWN"
        status = _status_of(self._m, error)
        details = _details(self._m, status) if status is not None else []
        reason: str | None = None
        domain: str | None = None
        metadata: dict[str, str] = {}
        for detail in details:
            if detail.get("@type") == ERROR_INFO_TYPE:
                found = detail.get("reason")
                reason = found if isinstance(found, str) else None
                found = detail.get("domain")
                domain = found if isinstance(found, str) else None
                found = detail.get("metadata")
                if isinstance(found, dict):
                    metadata = {k: v for k, v in found.items() if isinstance(v, str)}
                break
        if reason is not None and reason in CODE_OF_REASON and domain in (A2A_DOMAIN, None):
            return RPCError(CODE_OF_REASON[reason], message, details, status_name=name)
        if reason is None:
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return self._timeout()
            if code == grpc.StatusCode.UNAVAILABLE:
                lowered = message.lower()
                if "timeout" in lowered or "timed out" in lowered:
                    # A connection attempt outlived the connect timeout.
                    return Timeout(self.address, self._connect_timeout, "connect", self._peer)
                return TransportError(self.address, _unavailable(message), self._peer)
            if code == grpc.StatusCode.CANCELLED:
                return TransportError(self.address, "the call was cancelled (the channel closed)", self._peer)
            too_large = _TOO_LARGE.search(message)
            if code == grpc.StatusCode.RESOURCE_EXHAUSTED and too_large is not None:
                size, limit = int(too_large.group(1)), int(too_large.group(2))
                if size == sent:
                    return GRPCStatusError(
                        name, message, reason="TOO_LARGE", metadata={"limit": str(limit)}, details=details
                    )
                return InvalidResponse(f"the answer is larger than {limit} bytes")
        return GRPCStatusError(name, message, reason=reason, metadata=metadata, details=details)

    # The calls.

    def call(
        self, request_id: int, method: str, params: Any, extensions: tuple[str, ...]
    ) -> Deferred[Any]:
        """One unary call, bounded by the response timeout (C{request_id} is not sent)."""
        try:
            if self._closed:
                raise TransportError(self.address, "the client is closed", self._peer)
            multi, kind, streaming = self._method(method)
            if streaming:
                raise ClientError(f"{method} streams: call it as a stream")
            request = self._request(method, kind, params)
            future = multi.future(
                request, timeout=self._response_timeout, metadata=self._metadata(extensions),
                wait_for_ready=False,
            )
        except ClientError:
            return fail()
        sent = request.ByteSize()
        d: Deferred[Any] = Deferred(lambda _: future.cancel())

        def deliver(done: Any) -> None:
            # In the reactor thread.
            if d.called:
                return
            if done.cancelled():
                # Not by this Deferred (it would be called): the channel closed.
                d.errback(TransportError(self.address, "the client was closed before the answer", self._peer))
                return
            problem = done.exception()
            if problem is not None:
                d.errback(self.error(problem, sent))
                return
            try:
                result = self._m.json_format.MessageToDict(done.result())
            except Exception as e:  # noqa: BLE001 - say it in the client's words
                d.errback(InvalidResponse(f"the answer cannot be read as ProtoJSON: {type(e).__name__}"))
                return
            d.callback(result)

        # The callback runs on a gRPC thread (or here, if the call is over):
        # it only hands the call to the reactor.
        future.add_done_callback(lambda done: self._reactor.callFromThread(deliver, done))
        return Deadline(self._clock, self._response_timeout, self._timeout).start(d)

    def stream(
        self, request_id: int, method: str, params: Any, extensions: tuple[str, ...]
    ) -> ResponseStream:
        """One streaming call, read on a thread of its own; its events as they arrive."""
        flowing = threading.Event()
        flowing.set()
        window = threading.Semaphore(HANDOFF_WINDOW)
        events = ResponseStream(
            self._clock, self.address, self._response_timeout, self._idle_timeout,
            peer=self._peer, pause=flowing.clear, resume=flowing.set,
        )
        try:
            if self._closed:
                raise TransportError(self.address, "the client is closed", self._peer)
            multi, kind, streaming = self._method(method)
            if not streaming:
                raise ClientError(f"{method} does not stream: call it as a unary call")
            if len(self._streams) >= MAX_STREAMS:
                raise ClientError(f"this client reads at most {MAX_STREAMS} gRPC streams at once")
            request = self._request(method, kind, params)
            call = multi(request, metadata=self._metadata(extensions), wait_for_ready=False)
        except ClientError as e:
            events.end(e)
            return events

        def cancel() -> None:
            # The stream no longer counts once it is cancelled: its thread
            # ends as soon as grpcio ends the call.
            self._streams.pop(events, None)
            call.cancel()
            flowing.set()
            window.release()

        events.on_cancel = cancel
        self._streams[events] = cancel

        def finished(problem: Any) -> None:
            # In the reactor thread.
            self._streams.pop(events, None)
            if problem is None:
                events.end()
            elif isinstance(problem, ClientError):
                events.end(problem)
            else:
                events.end(self.error(problem))

        thread = threading.Thread(
            target=self._read_stream, args=(call, events, flowing, window, finished),
            name=f"beacon-grpc-stream-{method}", daemon=True,
        )
        thread.start()
        return events

    def _read_stream(
        self, call: Any, events: ResponseStream, flowing: threading.Event,
        window: threading.Semaphore, finished: Any,
    ) -> None:
        """
        On the stream's thread: hand each event to the reactor (at most
        L{HANDOFF_WINDOW} not yet taken), and wait while the consumer lags.
        """
        to_dict = self._m.json_format.MessageToDict

        def push(event: dict[str, Any]) -> None:
            window.release()
            events.push(event)

        problem: Any = None
        try:
            for response in call:
                event = to_dict(response)
                window.acquire()
                flowing.wait()
                if events.ended:
                    call.cancel()
                    break
                self._reactor.callFromThread(push, event)
        except self._m.grpc.RpcError as e:
            problem = e
        except Exception as e:  # noqa: BLE001 - end the stream, in the client's words
            problem = InvalidResponse(f"an event cannot be read: {type(e).__name__}")
        self._reactor.callFromThread(finished, problem)

    def close(self) -> Deferred[None]:
        """
        Close the channel, ending any call still open on it: a unary call
        fails with L{TransportError}, and so does a stream (its thread woken
        to end, should it wait for its consumer).
        """
        if not self._closed:
            self._closed = True
            for events, cancel in list(self._streams.items()):
                events.end(TransportError(self.address, "the client was closed", self._peer))
                cancel()
            self._channel.close()
        return succeed(None)
