"""
Reading the configuration: the TOML file, each section's keys and types
checked as read (an unknown key or a wrong type names what was meant), and
L{build_config}, which makes the one L{Config} from the file and the command
line and hands it to L{validate<beacon.config._checks.validate>}. Every key
is read as its field declares it (L{beacon.config._sections.key}): by its
type, or by the reader it names (L{READERS}).
"""

from __future__ import annotations

import ipaddress
import tomllib
from dataclasses import Field, fields, replace
from typing import Any, Callable, TypeVar

from beacon.config._checks import validate
from beacon.config._sections import (
    SECTIONS,
    Config,
    ConfigError,
    Key,
    SigningKeyOptions,
    declared_keys,
    default_of,
)

_T = TypeVar("_T")


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
    """The default of C{[section] key}, as its field declares it."""
    for where, name, item, _ in declared_keys():
        if (where, name) == (section, key):
            return default_of(item)
    return None


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


def _networks(
    section: str, key: str, values: Any
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ConfigError(f"[{section}] {key} must be a list of addresses or networks")
    try:
        return tuple(ipaddress.ip_network(v, strict=False) for v in values)
    except ValueError as e:
        raise ConfigError(f"[{section}] {key}: {e}") from None


def _strings(section: str, key: str, values: Any) -> tuple[str, ...]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ConfigError(f"[{section}] {key} must be a list of strings")
    return tuple(values)


def _endpoints(section: str, key: str, values: Any) -> tuple[str, ...]:
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ConfigError(f"[{section}] {key} must be a list of endpoint strings")
    return tuple(values)


def _optional(section: str, key: str, value: Any) -> str | None:
    """A string, where empty means none (None)."""
    text: str = _typed(section, key, value, str)
    return text or None


def _command(section: str, key: str, command: Any) -> tuple[str, ...]:
    if (
        not isinstance(command, list)
        or not command
        or not all(isinstance(v, str) for v in command)
        or not command[0]
    ):
        raise ConfigError(
            f"[{section}] {key} must be a list of strings, the program first, "
            'for example ["/usr/local/bin/tell-me", "--new"]'
        )
    return tuple(command)


def _mail_to(section: str, key: str, value: Any) -> tuple[str, ...]:
    """One address, or a list of them."""
    return _strings(section, key, [value] if isinstance(value, str) else value)


def _paths(section: str, key: str, value: Any) -> tuple[str, ...]:
    """One path, or a list of them."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(
            f'[{section}] {key} must be a path or a list of paths, for example: {key} = "card-key.pem"'
        )
    return tuple(value)


def _signing_keys(section: str, key: str, tables: Any) -> tuple[SigningKeyOptions, ...]:
    """C{[[card.signing]]}: tables of C{key} (required), C{kid} and C{jku}."""
    where = f"[[{section}.{key}]]"
    example = f'{where} key = "card-key.pem", kid = "2026-01", jku = "https://..."'
    if not isinstance(tables, list):
        raise ConfigError(f"{where} must be an array of tables, for example: {example}")
    keys = []
    for table in tables:
        if not isinstance(table, dict):
            raise ConfigError(f"{where} must be an array of tables, for example: {example}")
        for name in table:
            if name not in ("key", "kid", "jku"):
                near = did_you_mean(name, ("key", "kid", "jku"))
                hint = f" (did you mean {near!r}?)" if near else " (it takes key, kid and jku)"
                raise ConfigError(f"unknown key {name!r} in {where}{hint}")
        if not isinstance(table.get("key"), str) or not table["key"]:
            raise ConfigError(f"{where} needs key, the PEM private key's path, for example: {example}")
        for name in ("kid", "jku"):
            if not isinstance(table.get(name, ""), str):
                raise ConfigError(f"{where} {name} must be a string")
        keys.append(SigningKeyOptions(table["key"], table.get("kid", ""), table.get("jku", "")))
    return tuple(keys)


def _grpc_listen(section: str, key: str, listen: Any) -> tuple[str, ...]:
    """gRPC addresses: a list of them, or one; a port alone may be a number."""
    if isinstance(listen, (str, int)) and not isinstance(listen, bool):
        listen = [listen]
    if not isinstance(listen, list) or not all(
        isinstance(v, (str, int)) and not isinstance(v, bool) for v in listen
    ):
        raise ConfigError(
            f"[{section}] {key} must be a list of gRPC addresses, for example: "
            'listen = ["50051"] (127.0.0.1:50051)'
        )
    return tuple(str(v) for v in listen)


def _of_type(kind: type | tuple[type, ...]) -> Callable[[str, str, Any], Any]:
    def read(section: str, key: str, value: Any) -> Any:
        return _typed(section, key, value, kind)

    return read


def _seconds(section: str, key: str, value: Any) -> float:
    return float(_typed(section, key, value, (int, float)))


#: How a key's TOML value is read: by the name its field gives
#: (L{beacon.config._sections.Key.read}), else by the field's type.
READERS: dict[str, Callable[[str, str, Any], Any]] = {
    "bool": _of_type(bool),
    "int": _of_type(int),
    "float": _seconds,
    "str": _of_type(str),
    "tuple[str, ...]": _strings,
    "networks": _networks,
    "endpoints": _endpoints,
    "optional": _optional,
    "command": _command,
    "mail_to": _mail_to,
    "grpc_listen": _grpc_listen,
    "paths": _paths,
    "signing_keys": _signing_keys,
}


def reader_of(item: Field[Any]) -> Callable[[str, str, Any], Any]:
    """
    How the key of field C{item} is read.

    @raise KeyError: Neither its key nor its type names a reader.
    """
    declared: Key = item.metadata["key"]
    return READERS[declared.read or str(item.type)]


def _read_section(holder: _T, section: str, table: dict[str, Any]) -> _T:
    """C{holder} (a section's dataclass, or the L{Config}) with the keys of C{[section]} in C{table}."""
    changes: dict[str, Any] = {}
    for item in fields(holder):  # type: ignore[arg-type]
        declared: Key | None = item.metadata.get("key")
        if declared is None or (declared.section or section) != section:
            continue
        name = declared.name or item.name
        if name in table:
            changes[item.name] = reader_of(item)(section, name, table[name])
    if not changes:
        return holder
    try:
        return replace(holder, **changes)  # type: ignore[type-var]
    except ConfigError:
        raise
    except ValueError as e:
        # A section's own check (Auth's digests).
        raise ConfigError(str(e)) from None


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
    config = Config()
    sections: dict[str, Any] = {}
    for item in fields(Config):
        if "section" in item.metadata:
            name = item.metadata["section"]
            sections[item.name] = _read_section(
                getattr(config, item.name), name, values.get(name, {})
            )
    config = replace(config, **sections)
    for name in dict.fromkeys(where for where, _, _, holder in declared_keys() if holder is Config):
        config = _read_section(config, name, values.get(name, {}))

    if grpc:
        config = replace(config, grpc=replace(config.grpc, listen=tuple(grpc)))
    if ws:
        config = replace(config, ws=tuple(ws))
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
    return validate(config)
