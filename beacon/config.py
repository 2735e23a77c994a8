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
import tomllib
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from beacon.bindings.limits import SourceResolver
from beacon.intake import CardText

#: The embedded defaults: what `twistd -n beacon` runs with no options.
DEFAULT_DATA_DIR = "beacon-data"
DEFAULT_HTTP = ("tcp:8080:interface=127.0.0.1",)


class ConfigError(ValueError):
    """A configuration value is missing, unknown or invalid."""


@dataclass(frozen=True)
class Limits:
    """
    C{[limits]}: what the public doors enforce before parsing.

    @ivar max_body: Largest request body accepted, in bytes (inclusive).
    @ivar rate: Sustained requests per second per source (0 disables).
    @ivar burst: How many requests a fresh source may send at once.
    @ivar trusted_proxies: Networks whose X-Forwarded-For is believed.
    """

    max_body: int = 64 * 1024
    rate: float = 2.0
    burst: int = 20
    trusted_proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    def source_resolver(self) -> SourceResolver:
        """The L{SourceResolver} these limits describe."""
        return SourceResolver(self.trusted_proxies)


@dataclass(frozen=True)
class Config:
    """
    Everything Beacon needs to start.

    @ivar data_dir: The data directory (the SQLite store lives in it).
    @ivar http: Public HTTP listeners, as Twisted server endpoint strings.
    @ivar public_url: The base URL the card advertises, without a trailing
        slash; None to derive it from the first HTTP listener once bound.
    @ivar card: The operator's words on the card.
    @ivar limits: The public doors' limits.
    @ivar operator_socket: The operator's unix socket: None for the default
        (C{<data_dir>/operator.sock}), empty to disable it.
    @ivar operator_http: A loopback endpoint for the operator's bearer-token
        door (for hosts without unix sockets); empty: no such door.
    """

    data_dir: str = DEFAULT_DATA_DIR
    http: tuple[str, ...] = DEFAULT_HTTP
    public_url: str | None = None
    card: CardText = field(default_factory=CardText)
    limits: Limits = field(default_factory=Limits)
    operator_socket: str | None = None
    operator_http: str = ""

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
    "server": {"data", "http", "public_url"},
    "card": {
        "name",
        "description",
        "provider_organization",
        "provider_url",
        "documentation_url",
    },
    "limits": {"max_body", "rate", "burst", "trusted_proxies"},
    "operator": {"socket", "http"},
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


def _check_keys(values: dict[str, Any]) -> None:
    for section, table in values.items():
        if section not in _SECTIONS:
            raise ConfigError(f"unknown section [{section}]")
        if not isinstance(table, dict):
            raise ConfigError(f"[{section}] must be a table")
        for key in table:
            if key not in _SECTIONS[section]:
                raise ConfigError(f"unknown key {key!r} in [{section}]")


def _typed(section: str, key: str, value: Any, kind: type | tuple[type, ...]) -> Any:
    if isinstance(value, bool) and kind is not bool:
        raise ConfigError(f"[{section}] {key} has the wrong type")
    if not isinstance(value, kind):
        raise ConfigError(f"[{section}] {key} has the wrong type")
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


def build_config(
    file_values: dict[str, Any] | None = None,
    *,
    data_dir: str | None = None,
    http: tuple[str, ...] | list[str] | None = None,
    public_url: str | None = None,
    operator_socket: str | None = None,
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
    if server.get("public_url"):
        config = replace(
            config, public_url=_typed("server", "public_url", server["public_url"], str)
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
    it the way Twisted's endpoint parser does (escapes, last keyword wins).

    @raise ConfigError: It does not.
    """
    # _parse is the tokenizer serverFromString itself uses; reading the
    # string any other way could disagree with what Twisted binds.
    from twisted.internet.endpoints import _parse

    try:
        args, kwargs = _parse(description)
    except Exception:
        raise ConfigError(f"[operator] http {description!r} is not an endpoint") from None
    interface = kwargs.get("interface", "")
    if not args or args[0] != "tcp" or interface not in ("127.0.0.1", "::1", "localhost"):
        raise ConfigError(
            "[operator] http must be a tcp: endpoint on loopback, for example "
            '"tcp:0:interface=127.0.0.1"'
        )


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
