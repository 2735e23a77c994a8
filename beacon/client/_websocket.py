"""
The WebSocket binding (a2a-rust's, C{https://a2a-rust.com/bindings/websocket/v1},
also named C{WEBSOCKET}), client side, on autobahn's Twisted client with the
injected reactor and clock.

Wire contract (what this client sends and accepts)::

    GET <interface url>  Upgrade: websocket     (ws:// or wss://, TLS verified)
      A2A-Version: 1.0                  the service parameters, as headers
      A2A-Extensions: <uri>, ...        of the upgrade, fixed per connection
    -> 101; anything else fails the calls waiting for the connection
    client -> server: one JSON-RPC 2.0 request per text frame, a fresh id
    server -> client: one JSON-RPC 2.0 response per text frame, in any
      order, correlated by id; a stream's events carry its id, then
      {"result":{"status":"stream_complete"}} ends it (an error frame for
      its id ends it failing)

Many calls are in flight on one connection. Service parameters cannot vary
per call on this binding, so calls asking for another set of extensions go
over a connection of their own (one per set). A frame larger than
C{max_message} ends the connection (close 1009) and fails what was in
flight. Every autobahn timer (handshake, close handshake) runs on the
injected clock.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from autobahn.exception import PayloadExceededError
from autobahn.twisted.websocket import WebSocketClientFactory, WebSocketClientProtocol
from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.python.failure import Failure

from beacon.interfaces import IBeaconReactor
from beacon.client._errors import ClientError, InvalidResponse, Timeout, TransportError
from beacon.client._jsonrpc import A2A_VERSION, json_or_none, rpc_error
from beacon.client._stream import ResponseStream
from beacon.client._transport import Deadline, DialFactory, client_error
from beacon.protocol import dumps

#: The largest message read by default (the WebSocket binding §7: the server's cap).
DEFAULT_MAX_MESSAGE = 4 * 1024 * 1024
#: The frame that ends a stream (not a StreamResponse).
STREAM_COMPLETE = {"status": "stream_complete"}


class _Protocol(WebSocketClientProtocol):  # type: ignore[misc]
    """Hands frames and the close to its L{_Connection}."""

    connection: _Connection

    def onOpen(self) -> None:
        self.factory.connection._opened(self)

    def onMessage(self, payload: bytes, isBinary: bool) -> None:
        self.factory.connection._message(payload, isBinary)

    def onClose(self, wasClean: bool, code: int | None, reason: str | None) -> None:
        too_large = bool(
            getattr(self, "wasMaxMessagePayloadSizeExceeded", False)
            or getattr(self, "wasMaxFramePayloadSizeExceeded", False)
        )
        self.factory.connection._closed(1009 if too_large else code, reason)


class _Connection:
    """One WebSocket connection and the calls in flight on it."""

    def __init__(self, transport: WebSocketTransport, extensions: tuple[str, ...]) -> None:
        self._transport = transport
        self.protocol: _Protocol | None = None
        self.closed = False
        self.close_reason = ""
        self._pending: dict[int, Deferred[Any] | ResponseStream] = {}
        self._forgotten: set[int] = set()
        self._waiting: list[Deferred[_Connection]] = []
        self._handshake: IDelayedCall | None = None
        headers = {"A2A-Version": A2A_VERSION, **transport.headers}
        if extensions:
            headers["A2A-Extensions"] = ", ".join(extensions)
        factory = WebSocketClientFactory(transport.url, headers=headers, reactor=transport.reactor)
        factory.protocol = _Protocol
        factory.noisy = False
        factory.connection = self  # type: ignore[attr-defined]
        factory.setProtocolOptions(
            maxFramePayloadSize=transport.max_message,
            maxMessagePayloadSize=transport.max_message,
            # autobahn's timers run on the global reactor: the opening
            # handshake is timed on the transport's clock instead, and a
            # closing connection is aborted, not waited for.
            openHandshakeTimeout=0,
            closeHandshakeTimeout=0,
            serverConnectionDropTimeout=0,
            perMessageCompressionOffers=[],
        )
        self._factory = factory
        parts = urlsplit(transport.url)
        scheme = parts.scheme.lower().encode("ascii")
        port = parts.port or (443 if scheme == b"wss" else 80)
        endpoint = transport.dial.endpoint(scheme, (parts.hostname or "").encode("idna"), port)
        d = endpoint.connect(factory)
        self._connecting: Deferred[Any] | None = d
        d.addCallbacks(self._connected, self._failed)

    def _connected(self, protocol: Any) -> None:
        self._connecting = None
        # The upgrade has connect_timeout to be answered; onOpen or onClose
        # follows.
        self._handshake = self._transport.clock.callLater(
            self._transport.connect_timeout, self._handshake_expired, protocol
        )

    def _handshake_expired(self, protocol: Any) -> None:
        self._handshake = None
        self._closed(
            None,
            f"the agent did not answer the upgrade within {self._transport.connect_timeout} s",
        )
        if protocol.transport is not None:
            protocol.transport.abortConnection()

    def _stop_handshake_timer(self) -> None:
        if self._handshake is not None and self._handshake.active():
            self._handshake.cancel()
        self._handshake = None

    def _failed(self, failure: Failure) -> None:
        self._connecting = None
        error = client_error(failure, self._transport.url, False, self._transport.peer)
        self._fail_all(error if not isinstance(error, CancelledError) else TransportError(
            self._transport.url, "the connection was abandoned", self._transport.peer))

    def ready(self) -> Deferred[_Connection]:
        """Fires with this connection once it is open."""
        if self.protocol is not None:
            return _succeed(self)
        if self.closed:
            return _fail(TransportError(self._transport.url, self.close_reason, self._transport.peer))
        d: Deferred[_Connection] = Deferred(lambda d: self._waiting.remove(d) if d in self._waiting else None)
        self._waiting.append(d)
        return d

    def _opened(self, protocol: _Protocol) -> None:
        self._stop_handshake_timer()
        self.protocol = protocol
        waiting, self._waiting = self._waiting, []
        for d in waiting:
            d.callback(self)

    def _fail_all(self, error: Exception) -> None:
        self._stop_handshake_timer()
        self.closed = True
        self.close_reason = str(getattr(error, "reason", error))
        self._transport._forget(self)
        waiting, self._waiting = self._waiting, []
        for d in waiting:
            d.errback(error)
        pending, self._pending = self._pending, {}
        for call in pending.values():
            if isinstance(call, ResponseStream):
                call.end(error)
            elif not call.called:
                call.errback(error)

    def _closed(self, code: int | None, reason: str | None) -> None:
        self._stop_handshake_timer()
        if self.closed:
            return
        transport = self._transport
        if code == 1009:
            error: ClientError = InvalidResponse(
                f"a WebSocket message is larger than {transport.max_message} bytes"
            )
        else:
            words = "the connection closed"
            if self.protocol is None:
                words = "the WebSocket upgrade failed"
            if reason:
                words += f" ({''.join(c for c in reason if c.isprintable())[:120]})"
            error = TransportError(transport.url, words, transport.peer)
        self.protocol = None
        self._fail_all(error)

    def _message(self, payload: bytes, binary: bool) -> None:
        document = json_or_none(payload) if not binary else None
        found = document.get("id") if isinstance(document, dict) else None
        request_id: int = found if isinstance(found, int) else -1
        call = self._pending.get(request_id)
        if call is None and request_id in self._forgotten:
            return  # An answer to a call its caller gave up on.
        if call is None or not isinstance(document, dict) or document.get("jsonrpc") != "2.0":
            # Not an answer to anything in flight: a peer that talks
            # nonsense on a shared connection cannot be trusted with it.
            self.abort(InvalidResponse("the agent sent a frame that answers no call"))
            return
        if "error" in document:
            del self._pending[request_id]
            error = rpc_error(document["error"])
            if isinstance(call, ResponseStream):
                call.end(error)
            else:
                call.errback(error)
            return
        if "result" not in document:
            self.abort(InvalidResponse("a frame is neither a result nor an error"))
            return
        result = document["result"]
        if isinstance(call, ResponseStream):
            if result == STREAM_COMPLETE:
                del self._pending[request_id]
                call.end()
            elif isinstance(result, dict):
                call.push(result)
            else:
                del self._pending[request_id]
                call.end(InvalidResponse("an event is not a StreamResponse"))
            return
        del self._pending[request_id]
        call.callback(result)

    def send(self, request_id: int, method: str, params: Any, call: Deferred[Any] | ResponseStream) -> None:
        """Send one request; its answers go to C{call}."""
        assert self.protocol is not None
        try:
            self.protocol.sendMessage(
                dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            )
        except PayloadExceededError:
            # Our own request was too large; the connection is still fine.
            self.protocol.wasMaxMessagePayloadSizeExceeded = False
            raise ClientError(
                f"the request is larger than the {self._transport.max_message} bytes a message may take"
            ) from None
        # Answers come from the reactor, after this returns.
        self._pending[request_id] = call

    def forget(self, request_id: int) -> None:
        """Stop waiting for C{request_id} (its caller gave up); later frames for it are dropped."""
        self._pending.pop(request_id, None)
        self._forgotten.add(request_id)

    def abort(self, error: Exception | None = None) -> None:
        """Close the connection now; what is in flight fails with C{error}."""
        if self._connecting is not None:
            self._connecting.cancel()
        protocol, self.protocol = self.protocol, None
        if error is not None or not self.closed:
            self._fail_all(error or TransportError(self._transport.url, "the client closed the connection", self._transport.peer))
        if protocol is not None and protocol.transport is not None:
            protocol.transport.abortConnection()  # type: ignore[attr-defined]


class WebSocketTransport:
    """
    JSON-RPC over the WebSocket binding: calls share a connection per set
    of extensions, opened on first use and reopened after it closes.
    """

    def __init__(
        self,
        reactor: IBeaconReactor,
        url: str,
        *,
        clock: IReactorTime,
        dial: DialFactory,
        connect_timeout: float,
        response_timeout: float,
        idle_timeout: float,
        max_message: int = DEFAULT_MAX_MESSAGE,
        headers: dict[str, str] | None = None,
        peer: str = "the agent",
    ) -> None:
        self.reactor = reactor
        self.url = url
        self.address = url
        self.clock = clock
        self.dial = dial
        self.connect_timeout = connect_timeout
        self._response_timeout = response_timeout
        self._idle_timeout = idle_timeout
        self.max_message = max_message
        self.headers = dict(headers or {})
        self.peer = peer
        self._connections: dict[tuple[str, ...], _Connection] = {}

    def _forget(self, connection: _Connection) -> None:
        for key, value in list(self._connections.items()):
            if value is connection:
                del self._connections[key]

    def _connection(self, extensions: tuple[str, ...]) -> _Connection:
        connection = self._connections.get(extensions)
        if connection is None or connection.closed:
            connection = self._connections[extensions] = _Connection(self, extensions)
        return connection

    def _timeout(self) -> Timeout:
        return Timeout(self.url, self._response_timeout, "answer", self.peer)

    def call(
        self, request_id: int, method: str, params: Any, extensions: tuple[str, ...]
    ) -> Deferred[Any]:
        """One unary call, bounded by the response timeout (the connection's opening included)."""
        holder: dict[str, _Connection] = {}

        async def call() -> Any:
            connection = holder["c"] = await self._connection(extensions).ready()
            answer: Deferred[Any] = Deferred(lambda _: connection.forget(request_id))
            connection.send(request_id, method, params, answer)
            return await answer

        return Deadline(self.clock, self._response_timeout, self._timeout).start(
            Deferred.fromCoroutine(call())
        )

    def stream(
        self, request_id: int, method: str, params: Any, extensions: tuple[str, ...]
    ) -> ResponseStream:
        """One streaming call on the shared connection."""
        events = ResponseStream(
            self.clock, self.url, self._response_timeout, self._idle_timeout, peer=self.peer
        )
        ready = self._connection(extensions).ready()

        def opened(connection: _Connection) -> None:
            if events.ended:
                return
            events.on_cancel = lambda: connection.forget(request_id)
            try:
                connection.send(request_id, method, params, events)
            except ClientError as e:
                events.end(e)

        def failed(failure: Failure) -> None:
            if not failure.check(CancelledError):
                events.end(failure)

        events.on_cancel = ready.cancel
        ready.addCallbacks(opened, failed)
        return events

    def close(self) -> Deferred[None]:
        """Close every connection; what is in flight fails."""
        for connection in list(self._connections.values()):
            connection.abort()
        self._connections.clear()
        return _succeed(None)


def _succeed(value: Any) -> Deferred[Any]:
    d: Deferred[Any] = Deferred()
    d.callback(value)
    return d


def _fail(error: Exception) -> Deferred[Any]:
    d: Deferred[Any] = Deferred()
    d.errback(error)
    return d
