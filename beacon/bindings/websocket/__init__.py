"""
The A2A WebSocket binding (a2a-rust's, C{https://a2a-rust.com/bindings/websocket/v1})
on autobahn's Twisted WebSocket server: the JSON-RPC binding's messages, one
JSON-RPC object per text frame, many calls in progress on one connection.

Wire contract::

    Upgrade (RFC 6455, version 13 only, no subprotocol, no compression)
      on the public HTTP listeners:  GET /a2a/ws        (ws:// or wss://)
      on a --ws listener:            GET /              (any path)
      -> 101, or a refusal with the HTTP+JSON error body (A2A §11.6):
         {"error":{"code":<status>,"status":...,"message":...,"details":[...]}}
         400 FAILED_PRECONDITION   not a valid upgrade     ErrorInfo INVALID_UPGRADE
         426 FAILED_PRECONDITION   WebSocket version != 13 ErrorInfo
             + Sec-WebSocket-Version: 13                    UNSUPPORTED_WEBSOCKET_VERSION
         403 PERMISSION_DENIED     Origin not allowed (no details)
         429 RESOURCE_EXHAUSTED    per-source rate        ErrorInfo RATE_LIMITED,
             + Retry-After                                  RetryInfo
             (checked when the head is complete, before any of it is parsed)
         503 UNAVAILABLE           [websocket] max_connections or
                                   max_connections_per_source reached
                                                            ErrorInfo TOO_MANY_CONNECTIONS
      A refusal is counted; the first of each kind a minute is logged, the
      rest summarised (ws.summary), so a flood of refusals writes a line a
      minute. Autobahn's own events are logged as ws.autobahn, summarised
      the same way, each value the peer could choose clipped to 200
      characters.

    Service parameters: the upgrade's header lines, captured once: names
      lower-cased; a line whose value is not visible ASCII (printable, SP,
      HT) left out; repeated lines joined with ", " ("; " for cookie);
      last-event-id dropped; A2A-Version from the header, else from the
      ?A2A-Version= query parameter. Beacon adds ":source" (the caller).

    Frames, client -> server: one JSON-RPC 2.0 request per text frame.
    Frames, server -> client: one JSON-RPC 2.0 response per text frame, in
      any order, correlated by id. Checks on each frame, in order:
        every frame counts against the per-source rate   -31429 RATE_LIMITED
                                                          + RetryInfo
        binary frame                                      -32700, id null
        message over [limits] max_body                    -31413 TOO_LARGE
        [auth] credential of the upgrade refused          -32600 UNAUTHENTICATED
        not one strict JSON-RPC object (batch: -32600)    -32700 / -32600
        [websocket] max_in_flight requests in progress    -32603 IN_FLIGHT_LIMIT
      then the dispatcher: the same methods, policy and errors as the HTTP
      JSON-RPC binding (-32009 on each request without A2A-Version 1.0).
      The first three refusals are made without parsing the frame: their
      id is read from the frame's first 256 bytes only (ID_PREFIX), null
      when it is not a member there or the frame is binary. A message over
      max_body is not held: past max_body its bytes are dropped as they
      arrive. A text message that is parsed must be UTF-8 (else close
      1007); one refused unparsed is not looked at. A message over
      [websocket] max_message (4 MiB) ends the connection (close 1009). A
      notification that runs is never answered; a refused one is answered
      with a null id.

    Time and backpressure: a frame begun but not complete within
      frame_timeout ([limits] body_timeout, 30 s) ends the connection (close
      1008); a connection with no request frame and nothing in progress for
      idle_timeout (300 s) is closed (1000). While the transport's buffer is
      full (the peer does not read) no further request is run: the rest of
      the last read (and any message of it already read) is held, the
      socket is not read, and only the answers of requests already in
      progress are held until it drains.

    Streams: each event {"jsonrpc":"2.0","id":<id>,"result":<StreamResponse>},
      then {"jsonrpc":"2.0","id":<id>,"result":{"status":"stream_complete"}};
      a failing stream ends with an error frame and no marker; a stream whose
      consumer falls behind by more than C{stream_queue} events is ended with
      a -32603 STREAM_LAGGED error frame. A stream is in progress until it
      ends.

ErrorInfo domains: C{a2a-protocol.org} for A2A errors, C{a2a-rust.com} for
the binding's UNAUTHENTICATED refusal (exactly as the WebSocket binding §6 shows it), and
L{BEACON_DOMAIN} for every reason Beacon itself defines here (TOO_LARGE,
RATE_LIMITED, IN_FLIGHT_LIMIT, STREAM_LAGGED and the upgrade refusals).

The binding uses autobahn's documented surface only: its protocol options,
the connection callbacks (C{onConnect}, C{onOpen}, C{onClose}) and the
streaming ones (C{onMessageBegin} ... C{onMessageEnd}), C{sendMessage},
C{sendClose}; beside them it overrides C{failHandshake} (the refusal body)
and C{sendCloseFrame} (to know a close was sent, and to send 1001 and 1008).
Every timer (handshake, close handshake, frame, idle, log summaries) runs
on the injected clock: autobahn's own timers, which run on the global
reactor, are turned off through its options, and the connection's own
timers end a late handshake through autobahn's C{onOpenHandshakeTimeout}
and C{onCloseHandshakeTimeout}. Plain frames, nearly all of
the traffic, are read and written by Beacon itself (L{PlainFrames}); the
factory's C{direct=False} leaves every frame to autobahn.

The rooms, from the bottom: C{_errors} (the errors frames are answered
with, the refused upgrades, the id of a frame refused unparsed),
C{_parameters} (the upgrade's service parameters), C{_log} (what
reaches the log, clipped and summarised), C{_frames} (how messages meet
the wire: L{IFrameIO}), C{_upgrade} (a connection until it is open),
C{_protocol} (the open connection), C{_factory} (the factory, the
resource, the service, the card's URI).
"""

from beacon.bindings.websocket._errors import (
    BEACON_DOMAIN,
    BINDING_DOMAIN,
    RATE_LIMITED_CODE,
    TOO_LARGE_CODE,
)
from beacon.bindings.websocket._factory import WebSocketFactory, WebSocketResource, WebSocketService
from beacon.bindings.websocket._frames import AutobahnFrames, IFrameIO, PlainFrames
from beacon.bindings.websocket._parameters import service_parameters
from beacon.bindings.websocket._protocol import STREAM_COMPLETE, WebSocketA2AProtocol
from beacon.protocol import WEBSOCKET_BINDING, websocket_url
from beacon.config import (
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MAX_MESSAGE,
    DEFAULT_STREAM_QUEUE,
    WebSocketOptions,
)

__all__ = [
    "BEACON_DOMAIN",
    "BINDING_DOMAIN",
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "DEFAULT_MAX_IN_FLIGHT",
    "DEFAULT_MAX_MESSAGE",
    "DEFAULT_STREAM_QUEUE",
    "RATE_LIMITED_CODE",
    "STREAM_COMPLETE",
    "TOO_LARGE_CODE",
    "WEBSOCKET_BINDING",
    "AutobahnFrames",
    "IFrameIO",
    "PlainFrames",
    "WebSocketA2AProtocol",
    "WebSocketFactory",
    "WebSocketOptions",
    "WebSocketResource",
    "WebSocketService",
    "service_parameters",
    "websocket_url",
]
