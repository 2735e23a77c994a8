"""
The configuration's sections as frozen data: L{Config} and the options of
each section, with their defaults, and the keys each TOML section takes.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any, Iterator
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
class Key:
    """
    Where a field of the configuration is read from in the TOML file. Each
    key is declared once, by its field (L{key}), which also gives its type,
    its default and (in its class's docstring) its documentation; the keys
    of each section (L{SECTIONS}), their reading, and the defaults that
    error messages quote are derived from the fields (L{declared_keys}).

    @ivar name: The key's name; empty: the field's own.
    @ivar section: The key's section; empty: the section of the dataclass
        that holds the field (see L{section}).
    @ivar read: How its TOML value is read where the field's type does not
        say (a reader of L{beacon.config._reading}); empty: by the type.
    """

    name: str = ""
    section: str = ""
    read: str = ""


def key(default: Any, name: str = "", *, section: str = "", read: str = "") -> Any:
    """A field read from the TOML key C{name} (see L{Key}); C{default} when absent."""
    return field(default=default, metadata={"key": Key(name, section, read)})


def section(name: str, holder: type) -> Any:
    """A field of L{Config} holding the dataclass C{holder} of the section C{[name]}."""
    return field(default_factory=holder, metadata={"section": name})


@dataclass(frozen=True)
class SigningKeyOptions:
    """
    One key that signs the public card (C{[[card.signing]]}, or a path of
    C{[card] signing_key}).

    @ivar key: The PEM private key's path (read at start-up, by the card's
        room: L{beacon.intake.card_signing_keys}).
    @ivar kid: The key id the signature names; empty: the key's RFC 7638
        thumbprint.
    @ivar jku: The URL of the JWKS that holds its public key; empty: none.
    """

    key: str
    kid: str = ""
    jku: str = ""


@dataclass(frozen=True)
class CardText:
    """
    The operator's words on the card (C{[card]} in the configuration), and
    the keys that sign it.

    @ivar name: The card's C{name}, and the discovery document's.
    @ivar description: The card's C{description}; the card adds Beacon's
        statement ("Cryptographic identity does not establish autonomy,
        consciousness or personhood.") to it.
    @ivar provider_organization: Who runs this Beacon (the card's
        C{provider}); with C{provider_url}, or neither.
    @ivar provider_url: The web site of C{provider_organization}.
    @ivar documentation_url: A page about this Beacon, for people (the
        card's C{documentationUrl}); empty: none.
    @ivar signing_key: The simple form: a PEM private key's path, or
        several (a rotation), each signing with its thumbprint as C{kid}.
    @ivar signing: The full form (C{[[card.signing]]} tables: C{key},
        C{kid}, C{jku}); not with C{signing_key}.
    """

    name: str = key("Beacon")
    description: str = key(
        "An inbox read by people. Submit a message and get a receipt; "
        "a person reviews it. Beacon never replies on its own, never contacts "
        "you and never resolves a URL you send."
    )
    provider_organization: str = key("")
    provider_url: str = key("")
    documentation_url: str = key("")
    signing_key: tuple[str, ...] = key((), read="paths")
    signing: tuple[SigningKeyOptions, ...] = key((), read="signing_keys")

    @property
    def signing_keys(self) -> tuple[SigningKeyOptions, ...]:
        """Every key that signs the card, in either form, in order."""
        return tuple(SigningKeyOptions(path) for path in self.signing_key) + self.signing


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

    allowed_origins: tuple[str, ...] = key(())
    require_origin: bool = key(False)
    max_message: int = key(DEFAULT_MAX_MESSAGE)
    max_in_flight: int = key(DEFAULT_MAX_IN_FLIGHT)
    handshake_timeout: float = key(DEFAULT_HANDSHAKE_TIMEOUT)
    max_connections: int = key(DEFAULT_WS_MAX_CONNECTIONS)
    max_connections_per_source: int = key(DEFAULT_WS_MAX_CONNECTIONS_PER_SOURCE)
    idle_timeout: float = key(DEFAULT_WS_IDLE_TIMEOUT)
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

    api_keys: tuple[str, ...] = key(())
    bearer_tokens: tuple[str, ...] = key(())

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

    max_body: int = key(DEFAULT_MAX_BODY)
    rate: float = key(2.0)
    burst: int = key(20)
    trusted_proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = key(
        (), read="networks"
    )
    idle_timeout: float = key(DEFAULT_IDLE_TIMEOUT)
    header_timeout: float = key(DEFAULT_HEADER_TIMEOUT)
    body_timeout: float = key(DEFAULT_BODY_TIMEOUT)
    max_connections: int = key(4096)
    max_connections_per_source: int = key(256)

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


#: Defaults of C{[grpc]}: the calls in progress at once (in units of 8),
#: the seconds in-flight calls have to finish when Beacon stops, and the bytes a request message
#: may hold beyond C{[limits] max_body} (its protobuf framing: a message
#: that fits in a JSON body of max_body bytes fits in its protobuf form).
DEFAULT_GRPC_WORKERS = 32
DEFAULT_GRPC_GRACE = 5.0
#: Defaults of C{[grpc]}'s door limits: calls one source may have in
#: progress (a sixteenth of the default cap of calls, so that one source
#: never holds them all), a connection's longest life, and the seconds
#: between keepalive pings on a silent connection.
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
    @ivar workers: The calls in progress at once, in units of 8 (those
        waiting for their request message included); more are refused
        RESOURCE_EXHAUSTED. The name is kept from the door's threaded days.
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

    listen: tuple[str, ...] = key((), read="grpc_listen")
    private_key: str = key("")
    certificate: str = key("")
    workers: int = key(DEFAULT_GRPC_WORKERS)
    grace: float = key(DEFAULT_GRPC_GRACE)
    max_calls_per_source: int = key(DEFAULT_GRPC_CALLS_PER_SOURCE)
    max_connection_age: float = key(DEFAULT_GRPC_CONNECTION_AGE)
    keepalive: float = key(DEFAULT_GRPC_KEEPALIVE)
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

    command: tuple[str, ...] = key((), read="command")
    interval: float = key(DEFAULT_NOTIFY_INTERVAL)
    timeout: float = key(DEFAULT_NOTIFY_TIMEOUT)
    include_content: bool = key(False)
    smtp: str = key("")
    mail_from: str = key("")
    mail_to: tuple[str, ...] = key((), read="mail_to")
    smtp_user: str = key("")
    smtp_password_file: str = key("")
    smtp_password: str = field(default="", repr=False)
    smtp_ca_file: str = key("")
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
        slash; not set (None): derived from the first HTTP listener once bound.
    @ivar access_log: Whether the public listeners log a line per request.
    @ivar direct: Whether the public listeners answer plain requests to
        Beacon's own resources on the direct channel (see
        L{beacon.bindings.http._direct}) and WebSocket connections read and write
        plain frames themselves; False: twisted.web serves every request and
        autobahn reads and writes every frame.
    @ivar cors_origins: The web origins whose pages may call the RPC
        endpoints (C{POST /a2a/v1}, the native submit) through CORS; empty:
        none (the discovery documents are open to every origin regardless).
    @ivar card: The operator's words on the card.
    @ivar limits: The public doors' limits.
    @ivar operator_socket: The operator's unix socket; not set (None):
        C{<data_dir>/operator.sock}; empty: no operator socket.
    @ivar operator_http: A loopback endpoint for the operator's bearer-token
        door (for hosts without unix sockets); empty: no such door.
    @ivar store_url: The submission store (C{[store] url}, C{--store}):
        C{sqlite:///PATH} or C{postgresql://user@host:port/db}; not set
        (None): the SQLite database in the data directory. It may hold a password:
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

    data_dir: str = key(DEFAULT_DATA_DIR, "data", section="server")
    http: tuple[str, ...] = key(DEFAULT_HTTP, section="server", read="endpoints")
    public_url: str | None = key(None, section="server", read="optional")
    access_log: bool = key(False, section="server")
    direct: bool = key(True, section="server")
    cors_origins: tuple[str, ...] = key((), section="server")
    card: CardText = section("card", CardText)
    limits: Limits = section("limits", Limits)
    operator_socket: str | None = key(None, "socket", section="operator", read="str")
    operator_http: str = key("", "http", section="operator")
    store_url: str | None = key(None, "url", section="store", read="optional")
    ws: tuple[str, ...] = key((), "listen", section="websocket")
    websocket: WebSocketOptions = section("websocket", WebSocketOptions)
    auth: Auth = section("auth", Auth)
    notify: Notify = section("notify", Notify)
    metrics_listen: str = key("", "listen", section="metrics")
    grpc: GRPCOptions = section("grpc", GRPCOptions)

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


def declared_keys() -> Iterator[tuple[str, str, Field[Any], Any]]:
    """
    Every key of the configuration, in the order of its fields: its
    section, its name, its field, and the dataclass holding the field
    (L{Config} or the dataclass of a section).
    """
    for outer in fields(Config):
        if "section" in outer.metadata:
            holder = outer.default_factory
            for inner in fields(holder):  # type: ignore[arg-type]
                declared: Key | None = inner.metadata.get("key")
                if declared is not None:
                    name = outer.metadata["section"]
                    yield declared.section or name, declared.name or inner.name, inner, holder
        elif "key" in outer.metadata:
            declared = outer.metadata["key"]
            yield declared.section, declared.name or outer.name, outer, Config


def default_of(item: Field[Any]) -> Any:
    """A field's default value."""
    if item.default is not MISSING:
        return item.default
    factory: Any = item.default_factory
    return factory()


#: The keys each section of the TOML file takes (derived from the fields).
SECTIONS: dict[str, set[str]] = {}
for _section, _name, _, _ in declared_keys():
    SECTIONS.setdefault(_section, set()).add(_name)


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
