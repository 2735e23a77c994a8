"""
Beacon's configuration: one frozen, validated L{Config} made from the TOML
file (C{etc/beacon.toml} is the commented reference) and the command line,
which overrides the file.

Every value is checked here, once; unknown sections and keys are errors, so a
typo never silently falls back to a default.
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from beacon.errors import StartupError
from beacon.intake import CardText
from beacon.notify import DEFAULT_INTERVAL, DEFAULT_TIMEOUT, resolve_program
from beacon.store import parse_store_url

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


#: Defaults of C{[notify]} (L{beacon.notify}'s): at most one
#: notification per C{interval} seconds, a delivery abandoned after
#: C{timeout}.
DEFAULT_NOTIFY_INTERVAL = DEFAULT_INTERVAL
DEFAULT_NOTIFY_TIMEOUT = DEFAULT_TIMEOUT
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
        return _smtp_server(self.smtp)


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


_SECTIONS: dict[str, set[str]] = {
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


def read_file(path: str) -> dict[str, Any]:
    """
    Read a TOML configuration file.

    @raise ConfigError: The file cannot be read or is not valid TOML.
    """
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path} is not valid TOML: {e}") from None


def did_you_mean(word: str, known: Any) -> str | None:
    """The one of C{known} that C{word} is most likely a misspelling of, if any."""
    import difflib

    near = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6)
    return near[0] if near else None


def _unknown_key(section: str, key: str) -> str:
    """What is wrong with C{key} in C{[section]}, and what was likely meant."""
    message = f"unknown key {key!r} in [{section}]"
    near = did_you_mean(key, _SECTIONS[section])
    if near is not None:
        return f"{message} (did you mean {near!r}?)"
    homes = sorted(other for other, keys in _SECTIONS.items() if key in keys)
    if homes:
        return f"{message}: it belongs in " + " or ".join(f"[{h}]" for h in homes)
    return message


def _check_keys(values: dict[str, Any]) -> None:
    for section, table in values.items():
        if section not in _SECTIONS:
            message = f"unknown section [{section}]"
            near = did_you_mean(section, _SECTIONS)
            if near is not None:
                message += f" (did you mean [{near}]?)"
            raise ConfigError(message)
        if not isinstance(table, dict):
            raise ConfigError(f"[{section}] must be a table")
        for key in table:
            if key not in _SECTIONS[section]:
                raise ConfigError(_unknown_key(section, key))


#: How a wrong type names the expected one, with an example value.
_KINDS: dict[type, tuple[str, str]] = {
    bool: ("true or false", "true"),
    int: ("a whole number", "10"),
    float: ("a number", "2.5"),
    str: ("a string", '"..."'),
}
_TOML_TYPES: dict[type, str] = {
    bool: "a boolean", int: "a whole number", float: "a number", str: "a string",
    list: "a list", dict: "a table",
}


def _wrong_type(section: str, key: str, value: Any, kind: type | tuple[type, ...]) -> str:
    """C{[section] key} holds C{value}, not one of C{kind}: say what it takes, for example."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # int and float together take any number; the first named gives the example.
    if set(kinds) == {int, float}:
        expected, example = "a number", "2.5"
    else:
        expected, example = _KINDS.get(kinds[0], (kinds[0].__name__, ""))
    default = _default(section, key)
    if default not in ("", None) and type(default) in kinds:
        example = _toml(default)
    got = next((name for t, name in _TOML_TYPES.items() if type(value) is t), type(value).__name__)
    text = f"[{section}] {key} must be {expected}, not {got}"
    if example:
        text += f", for example: {key} = {example}"
    return text


def _default(section: str, key: str) -> Any:
    """The default of C{[section] key}, where a dataclass of this module holds it."""
    holders: dict[str, Any] = {
        "server": Config(),
        "card": CardText(),
        "limits": Limits(),
        "websocket": WebSocketOptions(),
        "notify": Notify(),
        "grpc": GRPCOptions(),
    }
    return getattr(holders.get(section), {"data": "data_dir"}.get(key, key), None)


def _toml(value: Any) -> str:
    """A scalar as TOML writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        import json

        return json.dumps(value, ensure_ascii=False)
    return repr(value)


def _typed(section: str, key: str, value: Any, kind: type | tuple[type, ...]) -> Any:
    if isinstance(value, bool) and kind is not bool:
        raise ConfigError(_wrong_type(section, key, value, kind))
    if not isinstance(value, kind):
        raise ConfigError(_wrong_type(section, key, value, kind))
    return value


def check_url(name: str, value: str, *, path_allowed: bool = True) -> str:
    """
    Check an absolute http(s) URL; return it without a trailing slash.

    @raise ConfigError: It is not one.
    """
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{name} must be an absolute http:// or https:// URL")
    if parts.query or parts.fragment:
        raise ConfigError(f"{name} must not have a query or a fragment")
    if not path_allowed and parts.path not in ("", "/"):
        raise ConfigError(f"{name} must not have a path")
    return value.rstrip("/")


def _networks(values: Any) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ConfigError("[limits] trusted_proxies must be a list of addresses or networks")
    try:
        return tuple(ipaddress.ip_network(v, strict=False) for v in values)
    except ValueError as e:
        raise ConfigError(f"[limits] trusted_proxies: {e}") from None


def _strings(section: str, key: str, values: Any) -> tuple[str, ...]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ConfigError(f"[{section}] {key} must be a list of strings")
    return tuple(values)


def _websocket_options(values: dict[str, Any]) -> WebSocketOptions:
    options = WebSocketOptions()
    if "allowed_origins" in values:
        options = replace(
            options,
            allowed_origins=_strings("websocket", "allowed_origins", values["allowed_origins"]),
        )
    if "require_origin" in values:
        options = replace(
            options,
            require_origin=_typed("websocket", "require_origin", values["require_origin"], bool),
        )
    for key in ("max_message", "max_in_flight", "max_connections", "max_connections_per_source"):
        if key in values:
            options = replace(options, **{key: _typed("websocket", key, values[key], int)})
    for key in ("handshake_timeout", "idle_timeout"):
        if key in values:
            seconds: dict[str, Any] = {
                key: float(_typed("websocket", key, values[key], (int, float)))
            }
            options = replace(options, **seconds)
    return options


def _submitter_auth(values: dict[str, Any]) -> Auth:
    try:
        return Auth(
            api_keys=_strings("auth", "api_keys", values.get("api_keys", [])),
            bearer_tokens=_strings("auth", "bearer_tokens", values.get("bearer_tokens", [])),
        )
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _notify(values: dict[str, Any]) -> Notify:
    notify = Notify()
    if "command" in values:
        command = values["command"]
        if (
            not isinstance(command, list)
            or not command
            or not all(isinstance(v, str) for v in command)
            or not command[0]
        ):
            raise ConfigError(
                '[notify] command must be a list of strings, the program first, '
                'for example ["/usr/local/bin/tell-me", "--new"]'
            )
        notify = replace(notify, command=tuple(command))
    for key in ("interval", "timeout"):
        if key in values:
            seconds = float(_typed("notify", key, values[key], (int, float)))
            notify = replace(notify, **{key: seconds})  # type: ignore[arg-type]
    if "include_content" in values:
        notify = replace(
            notify,
            include_content=_typed("notify", "include_content", values["include_content"], bool),
        )
    for key in ("smtp", "mail_from", "smtp_user", "smtp_password_file", "smtp_ca_file"):
        if key in values:
            text = _typed("notify", key, values[key], str)
            notify = replace(notify, **{key: text})  # type: ignore[arg-type]
    if "mail_to" in values:
        mail_to = values["mail_to"]
        if isinstance(mail_to, str):
            mail_to = [mail_to]
        notify = replace(notify, mail_to=_strings("notify", "mail_to", mail_to))
    return notify


def build_config(
    file_values: dict[str, Any] | None = None,
    *,
    data_dir: str | None = None,
    http: tuple[str, ...] | list[str] | None = None,
    public_url: str | None = None,
    operator_socket: str | None = None,
    ws: tuple[str, ...] | list[str] | None = None,
    store_url: str | None = None,
    grpc: tuple[str, ...] | list[str] | None = None,
) -> Config:
    """
    Make the one validated L{Config} from a parsed file and command-line
    overrides (which win).

    @raise ConfigError: For any unknown key or invalid value.
    """
    values = file_values or {}
    _check_keys(values)
    server = values.get("server", {})
    card_values = values.get("card", {})
    operator_values = values.get("operator", {})
    limit_values = values.get("limits", {})

    config = Config()
    if "data" in server:
        config = replace(config, data_dir=_typed("server", "data", server["data"], str))
    if "http" in server:
        listeners = server["http"]
        if not isinstance(listeners, list) or not all(isinstance(v, str) for v in listeners):
            raise ConfigError("[server] http must be a list of endpoint strings")
        config = replace(config, http=tuple(listeners))
    if "access_log" in server:
        config = replace(
            config, access_log=_typed("server", "access_log", server["access_log"], bool)
        )
    if server.get("public_url"):
        config = replace(
            config, public_url=_typed("server", "public_url", server["public_url"], str)
        )
    if "direct" in server:
        config = replace(config, direct=_typed("server", "direct", server["direct"], bool))
    if "cors_origins" in server:
        config = replace(
            config, cors_origins=_strings("server", "cors_origins", server["cors_origins"])
        )

    card = CardText()
    for key in _SECTIONS["card"]:
        if key in card_values:
            card = replace(card, **{key: _typed("card", key, card_values[key], str)})

    limits = Limits()
    if "max_body" in limit_values:
        limits = replace(limits, max_body=_typed("limits", "max_body", limit_values["max_body"], int))
    if "rate" in limit_values:
        rate = _typed("limits", "rate", limit_values["rate"], (int, float))
        limits = replace(limits, rate=float(rate))
    if "burst" in limit_values:
        limits = replace(limits, burst=_typed("limits", "burst", limit_values["burst"], int))
    for key in ("max_connections", "max_connections_per_source"):
        if key in limit_values:
            count: int = _typed("limits", key, limit_values[key], int)
            limits = replace(limits, **{key: count})  # type: ignore[arg-type]
    for key in ("idle_timeout", "header_timeout", "body_timeout"):
        if key in limit_values:
            seconds = _typed("limits", key, limit_values[key], (int, float))
            limits = replace(limits, **{key: float(seconds)})  # type: ignore[arg-type]
    if "trusted_proxies" in limit_values:
        limits = replace(limits, trusted_proxies=_networks(limit_values["trusted_proxies"]))

    if "socket" in operator_values:
        config = replace(
            config,
            operator_socket=_typed("operator", "socket", operator_values["socket"], str),
        )
    if "http" in operator_values:
        config = replace(
            config, operator_http=_typed("operator", "http", operator_values["http"], str)
        )

    websocket_values = values.get("websocket", {})
    config = replace(
        config,
        websocket=_websocket_options(websocket_values),
        auth=_submitter_auth(values.get("auth", {})),
        notify=_notify(values.get("notify", {})),
    )
    config = _metrics(config, values.get("metrics", {}))
    config = replace(config, grpc=_grpc_options(values.get("grpc", {})))
    if grpc:
        config = replace(config, grpc=replace(config.grpc, listen=tuple(grpc)))
    if "listen" in websocket_values:
        config = replace(
            config, ws=_strings("websocket", "listen", websocket_values["listen"])
        )
    if ws:
        config = replace(config, ws=tuple(ws))

    store_values = values.get("store", {})
    if store_values.get("url") is not None:
        url = _typed("store", "url", store_values["url"], str)
        config = replace(config, store_url=url or None)
    if store_url is not None:
        config = replace(config, store_url=store_url or None)

    if data_dir is not None:
        config = replace(config, data_dir=data_dir)
    if operator_socket is not None:
        config = replace(config, operator_socket=operator_socket)
    if http:
        config = replace(config, http=tuple(http))
    if public_url is not None:
        config = replace(config, public_url=public_url or None)
    config = replace(config, card=card, limits=limits)
    return validate(config)


def _check_loopback_tcp(description: str) -> None:
    """
    Check that an endpoint string listens on TCP on loopback only, reading
    it as Twisted does: the string is parsed by C{serverFromString} and
    listened with on a L{MemoryReactor}, which records what it would bind.

    @raise ConfigError: It does not.
    """
    from twisted.internet.endpoints import TCP4ServerEndpoint, serverFromString
    from twisted.internet.protocol import Factory
    from twisted.internet.testing import MemoryReactor

    reactor = MemoryReactor()
    try:
        endpoint = serverFromString(reactor, description)
        endpoint.listen(Factory())
    except Exception:
        raise ConfigError(f"[operator] http {description!r} is not an endpoint") from None
    bound = reactor.tcpServers
    if (
        not isinstance(endpoint, TCP4ServerEndpoint)
        or len(bound) != 1
        or bound[0][3] not in ("127.0.0.1", "::1", "localhost")
    ):
        raise ConfigError(
            "[operator] http must be a tcp: endpoint on loopback, for example "
            '"tcp:0:interface=127.0.0.1"'
        )


def _check_origins(where: str, origins: tuple[str, ...]) -> None:
    for origin in origins:
        parts = urlsplit(origin)
        if origin != "null" and (
            not parts.scheme
            or not parts.netloc
            or parts.path
            or parts.query
            or parts.fragment
            or not origin.isascii()
        ):
            raise ConfigError(
                f"{where}: {origin!r} is not an origin "
                '(scheme://host[:port], for example "https://app.example", or "null")'
            )


def _check_websocket(options: WebSocketOptions) -> None:
    _check_origins("[websocket] allowed_origins", options.allowed_origins)
    if not (1024 <= options.max_message <= 64 * 1024 * 1024):
        raise ConfigError("[websocket] max_message must be between 1024 and 67108864 bytes")
    if not (1 <= options.max_in_flight <= 10_000):
        raise ConfigError("[websocket] max_in_flight must be between 1 and 10000")
    if not (0 < options.handshake_timeout <= 3600):
        raise ConfigError("[websocket] handshake_timeout must be above 0 and at most 3600 s")
    for key in ("max_connections", "max_connections_per_source"):
        if not (0 <= getattr(options, key) <= 1_000_000):
            raise ConfigError(f"[websocket] {key} must be between 0 (no cap) and 1000000")
    if not (0 <= options.idle_timeout <= 86_400):
        raise ConfigError("[websocket] idle_timeout must be between 0 (off) and 86400 s")
    if not (0 <= options.frame_timeout <= 86_400):
        raise ConfigError("the WebSocket frame timeout must be between 0 (off) and 86400 s")


def _smtp_server(url: str) -> tuple[bool, str, int]:
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


_ADDRESS = re.compile(r"\A[^\s@<>(),;:\\\"\[\]]+@[^\s@<>(),;:\\\"\[\]]+\Z")


def _check_address(key: str, address: str) -> None:
    if _ADDRESS.match(address) is None or not address.isascii() or not address.isprintable():
        raise ConfigError(
            f"[notify] {key}: {address!r} is not a bare ASCII mail address (user@host; "
            "an international domain in its xn-- form)"
        )


def _check_notify(notify: Notify) -> Notify:
    """
    Check C{[notify]}; read the password file.

    @raise ConfigError: For the first invalid value.
    """
    if notify.command:
        if not notify.command[0] or not all(isinstance(v, str) for v in notify.command):
            raise ConfigError("[notify] command must be a list of strings, the program first")
        try:
            resolve_program(notify.command[0])
        except StartupError as e:
            raise ConfigError(str(e)) from None
    if not (0 < notify.interval <= 86_400):
        raise ConfigError("[notify] interval must be above 0 and at most 86400 s")
    if not (0 < notify.timeout <= 3_600):
        raise ConfigError("[notify] timeout must be above 0 and at most 3600 s")
    if not notify.smtp:
        for key in ("mail_from", "mail_to", "smtp_user", "smtp_password_file", "smtp_ca_file"):
            if getattr(notify, key):
                raise ConfigError(f"[notify] {key} needs smtp (the mail server's URL)")
        return notify
    _smtp_server(notify.smtp)
    if not notify.mail_from:
        raise ConfigError("[notify] smtp needs mail_from (the digest's sender)")
    if not notify.mail_to:
        raise ConfigError("[notify] smtp needs mail_to (one address or a list)")
    _check_address("mail_from", notify.mail_from)
    for address in notify.mail_to:
        _check_address("mail_to", address)
    if bool(notify.smtp_user) != bool(notify.smtp_password_file):
        raise ConfigError("[notify] smtp_user and smtp_password_file go together")
    if notify.smtp_password_file:
        path = notify.smtp_password_file
        try:
            with open(path, "rb") as f:
                first = f.readline(4097)
        except OSError as e:
            raise ConfigError(
                f"[notify] smtp_password_file: cannot read {path}: {e.strerror or e}"
            ) from None
        try:
            password = first.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            raise ConfigError(f"[notify] smtp_password_file: {path} is not UTF-8") from None
        if not password or len(first) > 4096:
            raise ConfigError(
                f"[notify] smtp_password_file: {path} must hold the password on its "
                "first line (at most 4096 bytes)"
            )
        notify = replace(notify, smtp_password=password)
    if notify.smtp_ca_file:
        notify = replace(notify, smtp_ca=_read_certificates(notify.smtp_ca_file))
    return notify


_PEM_CERTIFICATE = re.compile(
    rb"-----BEGIN CERTIFICATE-----\r?\n.+?\r?\n-----END CERTIFICATE-----", re.DOTALL
)


def _read_certificates(path: str) -> tuple[bytes, ...]:
    """
    The PEM certificates in C{path} ([notify] smtp_ca_file).

    @raise ConfigError: It cannot be read or holds no certificate.
    """
    try:
        with open(path, "rb") as f:
            data = f.read(1024 * 1024 + 1)
    except OSError as e:
        raise ConfigError(f"[notify] smtp_ca_file: cannot read {path}: {e.strerror or e}") from None
    blocks = tuple(_PEM_CERTIFICATE.findall(data))
    if not blocks or len(data) > 1024 * 1024:
        raise ConfigError(
            f"[notify] smtp_ca_file: {path} must hold PEM certificates"
            " (-----BEGIN CERTIFICATE-----), at most 1 MiB"
        )
    from beacon.notify import smtp_trust_root

    try:
        smtp_trust_root(blocks)
    except ValueError as e:
        raise ConfigError(f"[notify] smtp_ca_file: {path}: {e}") from None
    return blocks


def validate(config: Config) -> Config:
    """
    Check a L{Config}'s values (also for configs built in code by
    embedders); return it with URLs normalised.

    @raise ConfigError: For the first invalid value.
    """
    if not config.data_dir:
        raise ConfigError("the data directory must not be empty")
    if not config.http:
        raise ConfigError("at least one HTTP listener is needed")
    if config.public_url is not None:
        config = replace(config, public_url=check_url("public_url", config.public_url))
    limits = config.limits
    if not (1024 <= limits.max_body <= 16 * 1024 * 1024):
        raise ConfigError("[limits] max_body must be between 1024 and 16777216 bytes")
    if not (0 <= limits.rate <= 1_000_000):
        raise ConfigError("[limits] rate must be between 0 (off) and 1000000 per second")
    if not (1 <= limits.burst <= 1_000_000):
        raise ConfigError("[limits] burst must be between 1 and 1000000")
    for key in ("max_connections", "max_connections_per_source"):
        if not (1 <= getattr(limits, key) <= 1_000_000):
            raise ConfigError(f"[limits] {key} must be between 1 and 1000000")
    for key in ("idle_timeout", "header_timeout", "body_timeout"):
        if not (0.1 <= getattr(limits, key) <= 86400):
            raise ConfigError(f"[limits] {key} must be between 0.1 and 86400 seconds")
    # A WebSocket frame has as long to arrive as an HTTP body.
    config = replace(
        config, websocket=replace(config.websocket, frame_timeout=limits.body_timeout)
    )
    _check_websocket(config.websocket)
    config = replace(config, notify=_check_notify(config.notify))
    _check_origins("[server] cors_origins", config.cors_origins)
    config = replace(config, cors_origins=tuple(o.lower() for o in config.cors_origins))
    if config.store_url is not None:
        try:
            parse_store_url(config.store_url)
        except ValueError as e:
            raise ConfigError(f"[store] url: {e}") from None
    socket_path = config.socket_path
    if socket_path is not None:
        if socket_path.split(":", 1)[0] in ("ssl", "tls", "tcp", "unix"):
            raise ConfigError(
                "the operator socket is a path, not an endpoint: a unix listener "
                "takes no TLS material"
            )
        if len(os.fsencode(os.path.abspath(socket_path))) > 107:
            raise ConfigError("the operator socket path is longer than 107 bytes")
    if config.operator_http:
        _check_loopback_tcp(config.operator_http)
    if config.metrics_listen:
        _check_metrics_listen(config.metrics_listen)
    config = replace(config, grpc=_check_grpc(config.grpc))
    card = config.card
    if not card.name.strip():
        raise ConfigError("[card] name must not be empty")
    if not card.description.strip():
        raise ConfigError("[card] description must not be empty")
    if bool(card.provider_organization) != bool(card.provider_url):
        raise ConfigError(
            "[card] provider_organization and provider_url go together (A2A requires both)"
        )
    if card.provider_url:
        card = replace(card, provider_url=check_url("[card] provider_url", card.provider_url))
    if card.documentation_url:
        card = replace(
            card,
            documentation_url=check_url("[card] documentation_url", card.documentation_url),
        )
    return replace(config, card=card)


def _metrics(config: Config, values: dict[str, Any]) -> Config:
    """C{config} with C{[metrics]} read from C{values}."""
    if "listen" in values:
        listen = _typed("metrics", "listen", values["listen"], str)
        config = replace(config, metrics_listen=listen)
    return config


def _check_metrics_listen(description: str) -> None:
    """
    Check that C{[metrics] listen} is a server endpoint string, reading it
    as Twisted does (on a L{MemoryReactor}: nothing is bound).

    @raise ConfigError: It is not.
    """
    from twisted.internet.endpoints import serverFromString
    from twisted.internet.protocol import Factory
    from twisted.internet.testing import MemoryReactor

    try:
        serverFromString(MemoryReactor(), description).listen(Factory())
    except Exception:
        raise ConfigError(
            f"[metrics] listen {description!r} is not an endpoint, for example: "
            'listen = "tcp:9464:interface=127.0.0.1"'
        ) from None


def _grpc_options(values: dict[str, Any]) -> GRPCOptions:
    """C{[grpc]} read from C{values} (checked by L{validate})."""
    options = GRPCOptions()
    if "listen" in values:
        listen = values["listen"]
        if isinstance(listen, (str, int)) and not isinstance(listen, bool):
            listen = [listen]
        if not isinstance(listen, list) or not all(
            isinstance(v, (str, int)) and not isinstance(v, bool) for v in listen
        ):
            raise ConfigError(
                '[grpc] listen must be a list of gRPC addresses, for example: '
                'listen = ["50051"] (127.0.0.1:50051)'
            )
        options = replace(options, listen=tuple(str(v) for v in listen))
    for key in ("private_key", "certificate"):
        if key in values:
            options = replace(options, **{key: _typed("grpc", key, values[key], str)})  # type: ignore[arg-type]
    for key in ("workers", "max_calls_per_source"):
        if key in values:
            options = replace(options, **{key: _typed("grpc", key, values[key], int)})  # type: ignore[arg-type]
    for key in ("grace", "max_connection_age", "keepalive"):
        if key in values:
            seconds = float(_typed("grpc", key, values[key], (int, float)))
            options = replace(options, **{key: seconds})  # type: ignore[arg-type]
    return options


_GRPC_ADDRESS = re.compile(r"\A(?:(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]*):)?([0-9]{1,5})\Z")


def grpc_address(address: str) -> str:
    """
    A C{[grpc] listen} address in full: C{host:port}, with C{127.0.0.1}
    for a bare C{port} or C{:port}.

    @raise ConfigError: It is not C{[host]:port} with a port from 0 to
        65535 (0: any free port).
    """
    match = _GRPC_ADDRESS.match(address.strip())
    if match is None or int(match.group(2)) > 65535:
        raise ConfigError(
            f"[grpc] listen {address!r} is not a gRPC address: host:port, [v6]:port, "
            'or a port alone for 127.0.0.1 (for example 127.0.0.1:50051, or 50051)'
        )
    host = match.group(1) or "127.0.0.1"
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise ConfigError(f"[grpc] listen {address!r}: {host} is not an IPv6 address") from None
    return f"{host}:{int(match.group(2))}"


def _read_pem(key: str, path: str, marker: bytes) -> bytes:
    """
    The PEM file C{path} of C{[grpc] key}, which must hold C{marker}.

    @raise ConfigError: It cannot be read, or does not hold one.
    """
    try:
        with open(path, "rb") as f:
            data = f.read(1024 * 1024 + 1)
    except OSError as e:
        raise ConfigError(f"[grpc] {key}: cannot read {path}: {e.strerror or e}") from None
    if marker not in data or len(data) > 1024 * 1024:
        raise ConfigError(
            f"[grpc] {key}: {path} must be a PEM file (-----BEGIN ...-----) of at most 1 MiB"
        )
    return data


def _check_grpc(options: GRPCOptions) -> GRPCOptions:
    """
    Check C{[grpc]}; read its key and certificate.

    @raise ConfigError: For the first invalid value.
    """
    listen = tuple(grpc_address(address) for address in options.listen)
    if len(set(listen)) != len(listen):
        raise ConfigError("[grpc] listen names one address twice")
    if not (1 <= options.workers <= 1000):
        raise ConfigError("[grpc] workers must be between 1 and 1000")
    if not (0 <= options.grace <= 3600):
        raise ConfigError("[grpc] grace must be between 0 and 3600 s")
    if not (0 <= options.max_calls_per_source <= 100_000):
        raise ConfigError("[grpc] max_calls_per_source must be between 0 (no cap) and 100000")
    if not (options.max_connection_age == 0 or 1 <= options.max_connection_age <= 86400 * 365):
        raise ConfigError(
            "[grpc] max_connection_age must be 0 (no limit) or between 1 s and a year"
        )
    if not (options.keepalive == 0 or 1 <= options.keepalive <= 86400):
        raise ConfigError("[grpc] keepalive must be 0 (no pings) or between 1 s and a day")
    if bool(options.private_key) != bool(options.certificate):
        raise ConfigError(
            "[grpc] private_key and certificate go together (both for TLS, neither for"
            " plaintext)"
        )
    options = replace(options, listen=listen)
    if options.private_key and not options.key_pem:
        options = replace(
            options,
            key_pem=_read_pem("private_key", options.private_key, b"PRIVATE KEY-----"),
            certificate_pem=_read_pem(
                "certificate", options.certificate, b"-----BEGIN CERTIFICATE-----"
            ),
        )
    return options
