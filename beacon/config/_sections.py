"""
The configuration's sections as frozen data: L{Config} and the options of
each section, with their defaults, and the keys each TOML section takes.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit



#: The embedded defaults: what `twistd -n beacon` runs with no options.
DEFAULT_DATA_DIR = "beacon-data"
DEFAULT_HTTP = ("tcp:8080:interface=127.0.0.1",)
#: Defaults of C{[limits]}: the body cap, in bytes (inclusive), and the
#: seconds a connection may stay silent, a head may take to arrive from its
#: first byte, and a body from the end of its head.
DEFAULT_MAX_BODY = 64 * 1024
DEFAULT_IDLE_TIMEOUT = 60.0
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_BODY_TIMEOUT = 30.0


class ConfigError(ValueError):
    """A configuration value is missing, unknown or invalid."""


@dataclass(frozen=True)
class CardText:
    """
    The operator's words on the card (C{[card]} in the configuration).
    """

    name: str = "Beacon"
    description: str = (
        "An inbox read by people. Submit a message and get a receipt; "
        "a person reviews it. Beacon never replies on its own, never contacts "
        "you and never resolves a URL you send."
    )
    provider_organization: str = ""
    provider_url: str = ""
    documentation_url: str = ""


#: Defaults of C{[websocket]} (a2a-rust's binding; the caps and the idle timeout
#: are Beacon's, where a2a-rust leaves them off).
DEFAULT_MAX_MESSAGE = 4 * 1024 * 1024
DEFAULT_MAX_IN_FLIGHT = 64
DEFAULT_HANDSHAKE_TIMEOUT = 10.0
DEFAULT_WS_MAX_CONNECTIONS = 1024
DEFAULT_WS_MAX_CONNECTIONS_PER_SOURCE = 16
DEFAULT_WS_IDLE_TIMEOUT = 300.0
#: Seconds a frame may take from its first byte to its last: C{[limits]
#: body_timeout}.
DEFAULT_FRAME_TIMEOUT = DEFAULT_BODY_TIMEOUT
#: How many frames of one stream may wait for a consumer that does not read.
DEFAULT_STREAM_QUEUE = 256


@dataclass(frozen=True)
class WebSocketOptions:
    """
    C{[websocket]}: the WebSocket binding's limits.

    @ivar allowed_origins: The origins a browser may connect from, compared
        whole and ASCII case-insensitively; empty: any origin.
    @ivar require_origin: Refuse upgrades without an Origin header (every
        non-browser client sends none).
    @ivar max_message: The largest incoming message, in bytes; a larger one
        ends the connection.
    @ivar max_in_flight: Requests in progress per connection (a stream
        counts until it ends).
    @ivar handshake_timeout: Seconds from connect to an upgraded connection
        (the TLS handshake included on C{ssl:} listeners).
    @ivar max_connections: Open WebSocket connections per Beacon (on a
        listener of the binding's own, counted from accept); 0: no cap.
    @ivar max_connections_per_source: Open WebSocket connections per
        source (the peer address, or the forwarded one of a trusted proxy); 0: no cap.
    @ivar idle_timeout: Seconds without a request frame, while nothing is
        in progress, before the connection is closed; 0: never.
    @ivar frame_timeout: Seconds from a frame's first byte to its last
        before the connection is ended (close 1008); C{[limits]
        body_timeout} in a configured Beacon; 0: never.
    @ivar stream_queue: Frames of one stream held for a peer that does not
        read, before the stream is ended as lagged.
    """

    allowed_origins: tuple[str, ...] = ()
    require_origin: bool = False
    max_message: int = DEFAULT_MAX_MESSAGE
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT
    max_connections: int = DEFAULT_WS_MAX_CONNECTIONS
    max_connections_per_source: int = DEFAULT_WS_MAX_CONNECTIONS_PER_SOURCE
    idle_timeout: float = DEFAULT_WS_IDLE_TIMEOUT
    frame_timeout: float = DEFAULT_FRAME_TIMEOUT
    stream_queue: int = DEFAULT_STREAM_QUEUE


_DIGEST = re.compile(r"\A[0-9a-f]{64}\Z")


@dataclass(frozen=True)
class Auth:
    """
    C{[auth]}: the credentials a submitter must present, as SHA-256 digests
    (lower-case hex, made with C{printf %s "$TOKEN" | sha256sum}); none of
    either kind: authentication is off.

    @ivar api_keys: Digests of the accepted API keys (C{X-API-Key}).
    @ivar bearer_tokens: Digests of the accepted bearer tokens
        (C{Authorization: Bearer}).
    """

    api_keys: tuple[str, ...] = ()
    bearer_tokens: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """
        @raise ValueError: A digest is not 64 hex digits.
        """
        for kind, digests in (("api_keys", self.api_keys), ("bearer_tokens", self.bearer_tokens)):
            normalised = tuple(d.strip().lower() for d in digests)
            for digest in normalised:
                if _DIGEST.match(digest) is None:
                    raise ValueError(
                        f"[auth] {kind} holds SHA-256 digests (64 hex digits, made "
                        'with: printf %s "$TOKEN" | sha256sum), not secrets'
                    )
            object.__setattr__(self, kind, normalised)


@dataclass(frozen=True)
class Limits:
    """
    C{[limits]}: what the public doors enforce before parsing.

    @ivar max_body: Largest request body accepted, in bytes (inclusive).
    @ivar rate: Sustained requests per second per source (0 disables).
    @ivar burst: How many requests a fresh source may send at once.
    @ivar trusted_proxies: Networks whose X-Forwarded-For is believed.
    @ivar idle_timeout: Seconds an HTTP connection may stay silent.
    @ivar header_timeout: Seconds from a request line to its last header.
    @ivar body_timeout: Seconds from the headers to the body's last byte.
    @ivar max_connections: Open connections one listener holds at most.
    @ivar max_connections_per_source: Open connections per source address.
    """

    max_body: int = DEFAULT_MAX_BODY
    rate: float = 2.0
    burst: int = 20
    trusted_proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    max_connections: int = 4096
    max_connections_per_source: int = 256

    def site_options(self) -> dict[str, Any]:
        """The keyword arguments of a L{BeaconSite} these limits describe."""
        return {
            "max_body": self.max_body,
            "idle_timeout": self.idle_timeout,
            "header_timeout": self.header_timeout,
            "body_timeout": self.body_timeout,
            "max_connections": self.max_connections,
            "max_connections_per_source": self.max_connections_per_source,
        }


#: Defaults of C{[grpc]}: grpcio's worker threads, the seconds in-flight
#: calls have to finish when Beacon stops, and the bytes a request message
#: may hold beyond C{[limits] max_body} (its protobuf framing: a message
#: that fits in a JSON body of max_body bytes fits in its protobuf form).
DEFAULT_GRPC_WORKERS = 32
DEFAULT_GRPC_GRACE = 5.0
#: Defaults of C{[grpc]}'s door limits: calls one source may have in
#: progress (half the default workers, so that one source never holds
#: them all), a connection's longest life, and the seconds between
#: keepalive pings on a silent connection.
DEFAULT_GRPC_CALLS_PER_SOURCE = 16
DEFAULT_GRPC_CONNECTION_AGE = 3600.0
DEFAULT_GRPC_KEEPALIVE = 60.0
GRPC_ENVELOPE = 1024


@dataclass(frozen=True)
class GRPCOptions:
    """
    C{[grpc]}: the A2A gRPC binding's listeners (off when C{listen} is
    empty).

    @ivar listen: gRPC addresses, C{host:port} (C{[v6]:port} for IPv6);
        a bare C{port} or C{:port} is read as C{127.0.0.1:port}.
    @ivar private_key: A PEM private key file: with C{certificate}, every
        listener speaks TLS.
    @ivar certificate: The PEM certificate (chain) file for C{private_key}.
    @ivar workers: The size of grpcio's thread pool (calls served at once;
        each waits for the reactor, which runs the policy).
    @ivar grace: Seconds in-flight calls have to finish when Beacon stops
        (or a connection at its C{max_connection_age}), before they are
        cancelled.
    @ivar max_calls_per_source: Calls one source may have in progress,
        those waiting for their request message included; 0: no cap.
    @ivar max_connection_age: Seconds a connection is kept at most (then
        GOAWAY: the peer reconnects); 0: no limit.
    @ivar keepalive: Seconds between the pings Beacon sends on a silent
        connection to find a peer that is gone; 0: none.
    @ivar key_pem: The key read from C{private_key} (never shown by
        C{repr}).
    @ivar certificate_pem: The certificate read from C{certificate}.
    """

    listen: tuple[str, ...] = ()
    private_key: str = ""
    certificate: str = ""
    workers: int = DEFAULT_GRPC_WORKERS
    grace: float = DEFAULT_GRPC_GRACE
    max_calls_per_source: int = DEFAULT_GRPC_CALLS_PER_SOURCE
    max_connection_age: float = DEFAULT_GRPC_CONNECTION_AGE
    keepalive: float = DEFAULT_GRPC_KEEPALIVE
    key_pem: bytes = field(default=b"", repr=False)
    certificate_pem: bytes = field(default=b"", repr=False)

    @property
    def tls(self) -> bool:
        """Whether the listeners speak TLS."""
        return bool(self.private_key)

    def max_receive_message_length(self, max_body: int) -> int:
        """The largest request message a listener accepts: C{max_body} plus framing."""
        return max_body + GRPC_ENVELOPE


#: Defaults of C{[notify]}: at most one notification per C{interval}
#: seconds; a delivery abandoned (a command killed) after C{timeout}.
DEFAULT_NOTIFY_INTERVAL = 60.0
DEFAULT_NOTIFY_TIMEOUT = 30.0
#: The ports of C{smtp://} and C{smtps://} URLs without one.
SMTP_PORTS = {"smtp": 25, "smtps": 465}


@dataclass(frozen=True)
class Notify:
    """
    C{[notify]}: where the operator is told of new submissions. Neither
    C{command} nor C{smtp}: notifications are off.

    @ivar command: The program and its arguments, run without a shell for
        each notification, the summary as JSON on its standard input.
    @ivar interval: The fewest seconds between two notifications of one
        channel.
    @ivar timeout: Seconds a delivery (a run of the command, a mail) may
        take before it is abandoned (the command killed) and retried.
    @ivar include_content: Whether notifications carry the submitted
        content; off, they carry ids, times, doors, sizes and structured
        subjects only.
    @ivar smtp: The mail server, C{smtp://host[:port]} (STARTTLS when
        offered) or C{smtps://host[:port]} (TLS); empty: no mail.
    @ivar mail_from: The digest's sender.
    @ivar mail_to: The digest's recipients.
    @ivar smtp_user: Authenticate to the mail server as this user.
    @ivar smtp_password_file: The file holding C{smtp_user}'s password
        (its first line), read when the configuration is validated.
    @ivar smtp_password: The password read from C{smtp_password_file}
        (never shown by C{repr}).
    @ivar smtp_ca_file: A PEM file of the certificates the mail server's
        must chain to (a private CA, or the server's own self-signed
        certificate), instead of the system's trust roots.
    @ivar smtp_ca: The PEM certificates read from C{smtp_ca_file}.
    """

    command: tuple[str, ...] = ()
    interval: float = DEFAULT_NOTIFY_INTERVAL
    timeout: float = DEFAULT_NOTIFY_TIMEOUT
    include_content: bool = False
    smtp: str = ""
    mail_from: str = ""
    mail_to: tuple[str, ...] = ()
    smtp_user: str = ""
    smtp_password_file: str = ""
    smtp_password: str = field(default="", repr=False)
    smtp_ca_file: str = ""
    smtp_ca: tuple[bytes, ...] = field(default=(), repr=False)

    @property
    def enabled(self) -> bool:
        """Whether any channel is configured."""
        return bool(self.command or self.smtp)

    @property
    def smtp_server(self) -> tuple[bool, str, int]:
        """
        C{smtp} read: whether it is TLS from the first byte (C{smtps://}),
        the host and the port.

        @raise ConfigError: It is not an C{smtp://} or C{smtps://} URL of a
            host and an optional port.
        """
        return smtp_server(self.smtp)


@dataclass(frozen=True)
class Config:
    """
    Everything Beacon needs to start.

    @ivar data_dir: The data directory (the SQLite store lives in it).
    @ivar http: Public HTTP listeners, as Twisted server endpoint strings.
    @ivar public_url: The base URL the card advertises, without a trailing
        slash; None to derive it from the first HTTP listener once bound.
    @ivar access_log: Whether the public listeners log a line per request.
    @ivar direct: Whether the public listeners answer plain requests to
        Beacon's own resources on the direct channel (see
        L{beacon.bindings._direct}) and WebSocket connections read and write
        plain frames themselves; False: twisted.web serves every request and
        autobahn reads and writes every frame.
    @ivar cors_origins: The web origins whose pages may call the RPC
        endpoints (C{POST /a2a/v1}, the native submit) through CORS; empty:
        none (the discovery documents are open to every origin regardless).
    @ivar card: The operator's words on the card.
    @ivar limits: The public doors' limits.
    @ivar operator_socket: The operator's unix socket: None for the default
        (C{<data_dir>/operator.sock}), empty to disable it.
    @ivar operator_http: A loopback endpoint for the operator's bearer-token
        door (for hosts without unix sockets); empty: no such door.
    @ivar store_url: The submission store (C{[store] url}, C{--store}):
        C{sqlite:///PATH} or C{postgresql://user@host:port/db}; None for
        the SQLite database in the data directory. It may hold a password:
        show it only as L{beacon.store.parse_store_url}'s C{display}.
    @ivar ws: Listeners of the WebSocket binding's own (C{--ws}), beside
        C{/a2a/ws} on every public HTTP listener.
    @ivar websocket: The WebSocket binding's limits (C{[websocket]}).
    @ivar auth: The submitter credentials the public doors require
        (C{[auth]}); none by default.
    @ivar notify: Where the operator is told of new submissions
        (C{[notify]}); nowhere by default.
    @ivar metrics_listen: An endpoint serving C{/metrics} (and the health
        checks) on a site of its own (C{[metrics] listen}); empty: none
        (the operator doors serve C{/metrics} regardless).
    @ivar grpc: The A2A gRPC binding's listeners and options (C{[grpc]});
        off by default.
    """

    data_dir: str = DEFAULT_DATA_DIR
    http: tuple[str, ...] = DEFAULT_HTTP
    public_url: str | None = None
    access_log: bool = False
    direct: bool = True
    cors_origins: tuple[str, ...] = ()
    card: CardText = field(default_factory=CardText)
    limits: Limits = field(default_factory=Limits)
    operator_socket: str | None = None
    operator_http: str = ""
    store_url: str | None = None
    ws: tuple[str, ...] = ()
    websocket: WebSocketOptions = field(default_factory=WebSocketOptions)
    auth: Auth = field(default_factory=lambda: Auth())
    notify: Notify = field(default_factory=Notify)
    metrics_listen: str = ""
    grpc: GRPCOptions = field(default_factory=GRPCOptions)

    @property
    def socket_path(self) -> str | None:
        """
        The operator socket's path: C{operator_socket}, or
        C{<data_dir>/operator.sock} when that is None; None when disabled
        (C{operator_socket} is empty).
        """
        if self.operator_socket is None:
            return os.path.join(self.data_dir, "operator.sock")
        return self.operator_socket or None

    @property
    def operator_discovery_file(self) -> str:
        """Where the bearer door's C{{url, token}} is written."""
        return os.path.join(self.data_dir, "operator-http.json")


SECTIONS: dict[str, set[str]] = {
    "server": {"data", "http", "public_url", "access_log", "cors_origins", "direct"},
    "card": {
        "name",
        "description",
        "provider_organization",
        "provider_url",
        "documentation_url",
    },
    "limits": {
        "max_body",
        "rate",
        "burst",
        "trusted_proxies",
        "idle_timeout",
        "header_timeout",
        "body_timeout",
        "max_connections",
        "max_connections_per_source",
    },
    "operator": {"socket", "http"},
    "store": {"url"},
    "websocket": {
        "listen",
        "allowed_origins",
        "require_origin",
        "max_message",
        "max_in_flight",
        "handshake_timeout",
        "max_connections",
        "max_connections_per_source",
        "idle_timeout",
    },
    "auth": {"api_keys", "bearer_tokens"},
    "notify": {
        "command",
        "interval",
        "timeout",
        "include_content",
        "smtp",
        "mail_from",
        "mail_to",
        "smtp_user",
        "smtp_password_file",
        "smtp_ca_file",
    },
    "metrics": {"listen"},
    "grpc": {
        "listen",
        "private_key",
        "certificate",
        "workers",
        "grace",
        "max_calls_per_source",
        "max_connection_age",
        "keepalive",
    },
}


def smtp_server(url: str) -> tuple[bool, str, int]:
    parts = urlsplit(url)
    problem = "[notify] smtp must be smtp://host[:port] or smtps://host[:port]"
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"{problem}: the port is not a number from 0 to 65535") from None
    if parts.scheme not in SMTP_PORTS or not parts.hostname:
        raise ConfigError(problem)
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            f"{problem}, without credentials: they go in smtp_user and smtp_password_file"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment or port == 0:
        raise ConfigError(problem)
    return parts.scheme == "smtps", parts.hostname, port or SMTP_PORTS[parts.scheme]
