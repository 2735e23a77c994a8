"""
Reading the configuration: the TOML file, each section's keys and types
checked as read (an unknown key or a wrong type names what was meant), and
L{build_config}, which makes the one L{Config} from the file and the command
line and hands it to L{validate<beacon.config._checks.validate>}.
"""

from __future__ import annotations

import ipaddress
import tomllib
from dataclasses import replace
from typing import Any

from beacon.config._checks import validate
from beacon.config._sections import (
    SECTIONS,
    Auth,
    CardText,
    Config,
    ConfigError,
    GRPCOptions,
    Limits,
    Notify,
    WebSocketOptions,
)


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
    near = did_you_mean(key, SECTIONS[section])
    if near is not None:
        return f"{message} (did you mean {near!r}?)"
    homes = sorted(other for other, keys in SECTIONS.items() if key in keys)
    if homes:
        return f"{message}: it belongs in " + " or ".join(f"[{h}]" for h in homes)
    return message


def _check_keys(values: dict[str, Any]) -> None:
    for section, table in values.items():
        if section not in SECTIONS:
            message = f"unknown section [{section}]"
            near = did_you_mean(section, SECTIONS)
            if near is not None:
                message += f" (did you mean [{near}]?)"
            raise ConfigError(message)
        if not isinstance(table, dict):
            raise ConfigError(f"[{section}] must be a table")
        for key in table:
            if key not in SECTIONS[section]:
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
    for key in SECTIONS["card"]:
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


def _metrics(config: Config, values: dict[str, Any]) -> Config:
    """C{config} with C{[metrics]} read from C{values}."""
    if "listen" in values:
        listen = _typed("metrics", "listen", values["listen"], str)
        config = replace(config, metrics_listen=listen)
    return config


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
