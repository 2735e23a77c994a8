"""
Checking the configuration's values: L{validate} checks a L{Config}, read
from a file or built in code by an embedder, section by section, and reads
the files it names (passwords, certificates, keys).
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import replace
from urllib.parse import urlsplit

from beacon.config._sections import (
    Config,
    ConfigError,
    GRPCOptions,
    Notify,
    WebSocketOptions,
    smtp_server,
)


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
    if not (0 < notify.interval <= 86_400):
        raise ConfigError("[notify] interval must be above 0 and at most 86400 s")
    if not (0 < notify.timeout <= 3_600):
        raise ConfigError("[notify] timeout must be above 0 and at most 3600 s")
    if not notify.smtp:
        for key in ("mail_from", "mail_to", "smtp_user", "smtp_password_file", "smtp_ca_file"):
            if getattr(notify, key):
                raise ConfigError(f"[notify] {key} needs smtp (the mail server's URL)")
        return notify
    smtp_server(notify.smtp)
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
    return blocks


def validate(config: Config) -> Config:
    """
    Check a L{Config}'s values (also for configs built in code by
    embedders); return it with URLs normalised.

    These are the checks of plain data, and of the files the configuration
    names; what only another room can say (whether the store URL names a
    store, whether C{[notify]}'s program is found) that room checks, all
    of it called by L{beacon.service.check_config}.

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
    if card.signing_key and card.signing:
        raise ConfigError(
            "[card] signing_key and [[card.signing]] say the same thing twice: "
            "use one (the tables for a kid or a jku of your own)"
        )
    signing = []
    for options in card.signing:
        if options.jku:
            options = replace(options, jku=check_url("[[card.signing]] jku", options.jku))
        signing.append(options)
    return replace(config, card=replace(card, signing=tuple(signing)))


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
