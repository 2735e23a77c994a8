"""
Configuration and start-up wiring: the TOML file and options become one
validated Config (unknown keys are errors, the command line wins), every file
in etc/ loads, the `beacon` tapname is a plugin, and makeService wires the
tree on a MemoryReactor.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Any

import pytest
from twisted.application.service import IServiceMaker
from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.testing import MemoryReactorClock
from twisted.plugin import getPlugins
from twisted.python import usage

from beacon.config import Config, ConfigError, build_config, read_file
from beacon.service import DataDirectory, Listeners, StartupError, derive_public_url, makeService
from beacon.tap import Options

ETC = Path(__file__).parent.parent / "etc"


def test_defaults_are_the_embedded_defaults() -> None:
    """No file and no options give ./beacon-data and HTTP on 127.0.0.1:8080."""
    config = build_config()
    assert config == Config()
    assert config.data_dir == "beacon-data"
    assert config.http == ("tcp:8080:interface=127.0.0.1",)
    assert config.public_url is None
    assert config.limits.max_body == 65536


def test_reference_file_loads_and_matches_defaults() -> None:
    """etc/beacon.toml is valid and documents exactly the defaults."""
    assert build_config(read_file(str(ETC / "beacon.toml"))) == Config()


def test_every_etc_file_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file in etc/ loads: the TOML parses and the .tac builds an application."""
    for path in ETC.iterdir():
        if path.suffix == ".toml":
            build_config(read_file(str(path)))
        elif path.suffix == ".tac":
            monkeypatch.chdir(tmp_path)
            namespace: dict[str, Any] = {"__file__": str(path)}
            exec(compile(path.read_text(), str(path), "exec"), namespace)
            assert namespace["application"] is not None
        elif path.suffix == ".service":
            pass  # tests/test_deploy.py verifies the systemd unit
        else:
            pytest.fail(f"etc/ holds {path.name}, which no test loads")


@pytest.mark.parametrize(
    "values, message",
    [
        ({"nope": {}}, "unknown section [nope]"),
        ({"server": {"port": 1}}, "unknown key 'port' in [server]"),
        ({"servr": {}}, "unknown section [servr] (did you mean [server]?)"),
        ({"server": {"acces_log": True}}, "unknown key 'acces_log' in [server] (did you mean 'access_log'?)"),
        ({"server": {"max_body": 1}}, "unknown key 'max_body' in [server]: it belongs in [limits]"),
        (
            {"limits": {"max_body": "big"}},
            "[limits] max_body must be a whole number, not a string, for example: max_body = 65536",
        ),
        (
            {"limits": {"max_body": True}},
            "[limits] max_body must be a whole number, not a boolean, for example: max_body = 65536",
        ),
        ({"limits": {"rate": "2"}}, "[limits] rate must be a number, not a string, for example: rate = 2.0"),
        (
            {"server": {"access_log": "yes"}},
            "[server] access_log must be true or false, not a string, for example: access_log = false",
        ),
        ({"card": {"name": 7}}, '[card] name must be a string, not a whole number, for example: name = "Beacon"'),
        ({"limits": {"max_body": 10}}, "max_body must be between"),
        ({"limits": {"rate": -1}}, "rate must be between"),
        ({"limits": {"burst": 0}}, "burst must be between"),
        ({"limits": {"trusted_proxies": ["nope"]}}, "trusted_proxies"),
        ({"server": {"public_url": "ftp://x"}}, "public_url must be an absolute"),
        ({"server": {"public_url": "https://x/?q=1"}}, "must not have a query"),
        ({"server": {"http": "tcp:80"}}, "must be a list"),
        ({"server": {"http": []}}, "at least one HTTP listener"),
        ({"card": {"provider_organization": "Org"}}, "go together"),
        ({"card": {"name": " "}}, "name must not be empty"),
    ],
)
def test_invalid_values_are_errors(values: dict[str, Any], message: str) -> None:
    """Each invalid or unknown value is a ConfigError that names it."""
    with pytest.raises(ConfigError) as caught:
        build_config(values)
    assert message in str(caught.value)


def test_command_line_overrides_the_file() -> None:
    """Options given on the command line win over the file."""
    config = build_config(
        {"server": {"data": "from-file", "http": ["tcp:1:interface=127.0.0.1"], "public_url": "https://file.example"}},
        data_dir="from-cli",
        http=["tcp:2:interface=127.0.0.1"],
        public_url="https://cli.example/",
    )
    assert config.data_dir == "from-cli"
    assert config.http == ("tcp:2:interface=127.0.0.1",)
    assert config.public_url == "https://cli.example"


def test_file_values_are_typed() -> None:
    """Limits and card text from the file arrive typed."""
    config = build_config(
        {
            "limits": {"rate": 5, "burst": 9, "max_body": 4096, "trusted_proxies": ["10.0.0.0/8", "::1"]},
            "card": {"name": "Inbox", "provider_organization": "Org", "provider_url": "https://org.example/"},
        }
    )
    assert config.limits.rate == 5.0
    assert config.limits.burst == 9
    assert config.limits.trusted_proxies == (
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("::1"),
    )
    assert config.card.provider_url == "https://org.example"


def test_unreadable_or_invalid_file(tmp_path: Path) -> None:
    """A missing file or a file that is not TOML is a ConfigError naming it."""
    with pytest.raises(ConfigError, match="cannot read"):
        read_file(str(tmp_path / "missing.toml"))
    bad = tmp_path / "bad.toml"
    bad.write_text("[server\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        read_file(str(bad))


def test_options_build_the_config(tmp_path: Path) -> None:
    """twistd beacon's options become the config; --http repeats."""
    options = Options()
    options.parseOptions(
        [
            "--data", str(tmp_path),
            "--http", "tcp:0:interface=127.0.0.1",
            "--http", "tcp:0:interface=\\:\\:1",
            "--public-url", "https://beacon.example",
        ]
    )
    assert options.config is not None
    assert options.config.http == ("tcp:0:interface=127.0.0.1", "tcp:0:interface=\\:\\:1")
    assert options.config.public_url == "https://beacon.example"


@pytest.mark.parametrize(
    "argv",
    [
        ["--http", "nonsense:1"],
        ["--public-url", "not a url"],
        ["--config", "/nonexistent/beacon.toml"],
        ["--unknown"],
    ],
)
def test_bad_options_are_usage_errors(argv: list[str]) -> None:
    """A bad option value is a UsageError before anything starts."""
    with pytest.raises(usage.UsageError):
        Options().parseOptions(argv)


def test_beacon_tapname_is_a_service_maker() -> None:
    """The twistd plugin `beacon` is found as an IServiceMaker pointing at beacon.tap."""
    makers = [m for m in getPlugins(IServiceMaker) if m.tapname == "beacon"]
    assert len(makers) == 1
    assert makers[0].options is Options


def test_make_service_wires_store_then_listeners(tmp_path: Path) -> None:
    """The tree checks the data directory, holds the store next, then binds every listener on the given reactor."""
    reactor = MemoryReactorClock()
    config = build_config(
        data_dir=str(tmp_path / "data"),
        http=["tcp:8080:interface=127.0.0.1", "tcp:8081:interface=\\:\\:1"],
        public_url="https://beacon.example",
    )
    checked, *children = list(makeService(config, reactor))
    assert isinstance(checked, DataDirectory) and checked.path == str(tmp_path / "data")
    assert type(children[0]).__name__ == "SQLiteStore"
    assert children[0].path == str(tmp_path / "data" / "beacon.sqlite3")
    assert isinstance(children[1], Listeners)
    children[1].privilegedStartService()
    assert [(port, interface) for port, _, _, interface in reactor.tcpServers] == [
        (8080, "127.0.0.1"),
        (8081, "::1"),
    ]
    children[1].stopService()


def test_listeners_fail_whole_when_one_cannot_bind(tmp_path: Path) -> None:
    """If one listener cannot bind, start-up fails naming it and the others are closed."""
    from twisted.internet.error import CannotListenError

    reactor = MemoryReactorClock()
    calls: list[int] = []
    original = reactor.listenTCP

    def listen(port: int, factory: Any, backlog: int = 50, interface: str = "") -> Any:
        calls.append(port)
        if port == 2:
            raise CannotListenError(interface, port, OSError("Address already in use"))
        return original(port, factory, backlog, interface)

    reactor.listenTCP = listen  # type: ignore[method-assign]
    from twisted.internet.protocol import Factory

    listeners = Listeners(reactor, ("tcp:1", "tcp:2"), Factory(), "http")
    with pytest.raises(StartupError) as caught:
        listeners.privilegedStartService()
    assert "'tcp:2'" in str(caught.value)
    assert "Address already in use" in str(caught.value)
    assert listeners.ports == []
    assert calls == [1, 2]


class _Port:
    def __init__(self, host: Any) -> None:
        self._host = host

    def getHost(self) -> Any:
        return self._host


@pytest.mark.parametrize(
    "description, host, expected",
    [
        ("tcp:0", IPv4Address("TCP", "127.0.0.1", 4000), "http://127.0.0.1:4000"),
        ("tcp:80", IPv4Address("TCP", "127.0.0.1", 80), "http://127.0.0.1"),
        ("ssl:443", IPv4Address("TCP", "0.0.0.0", 443), "https://localhost"),
        ("ssl:8443", IPv6Address("TCP", "::1", 8443), "https://[::1]:8443"),
    ],
)
def test_public_url_is_derived_from_the_first_listener(description: str, host: Any, expected: str) -> None:
    """Without a configured public URL the first bound listener names it."""
    assert derive_public_url(description, _Port(host)) == expected  # type: ignore[arg-type]


def test_public_url_cannot_be_derived_from_a_unix_listener() -> None:
    """A unix-socket listener has no URL: start-up asks for --public-url."""
    from twisted.internet.address import UNIXAddress

    with pytest.raises(StartupError, match="--public-url"):
        derive_public_url("unix:/tmp/x", _Port(UNIXAddress(b"/tmp/x")))  # type: ignore[arg-type]


def test_data_dir_is_relative_to_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative data directory is resolved against where Beacon runs."""
    monkeypatch.chdir(tmp_path)
    service = makeService(build_config(public_url="https://b.example"), MemoryReactorClock())
    store = list(service)[1]
    assert os.path.abspath(store.path) == str(tmp_path / "beacon-data" / "beacon.sqlite3")


def test_twistd_tree_freezes_the_start_up_heap_last(tmp_path: Any) -> None:
    """twistd beacon's tree ends with HeapFreeze, which freezes the collector's start-up heap."""
    import gc

    from beacon.service import HeapFreeze
    from beacon.tap import makeService

    options = Options()
    options.parseOptions(["--data", str(tmp_path), "--http", "tcp:0:interface=127.0.0.1", "--operator", ""])
    tree = makeService(options)
    assert isinstance(list(tree)[-1], HeapFreeze)
    from twisted.internet.task import Clock

    class Reactor(Clock):
        def __init__(self) -> None:
            super().__init__()
            self.when_running: list[Any] = []

        def callWhenRunning(self, f: Any) -> None:
            self.when_running.append(f)

    reactor = Reactor()
    freeze = HeapFreeze(reactor)
    gc.unfreeze()
    try:
        freeze.startService()
        assert gc.get_freeze_count() == 0  # not before the reactor runs
        (run,) = reactor.when_running
        run()
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_cors_origins_are_origins_compared_in_lower_case() -> None:
    """[server] cors_origins takes origins only (scheme://host[:port]) and keeps them lower-cased."""
    config = build_config({"server": {"cors_origins": ["https://App.Example:8443", "null"]}})
    assert config.cors_origins == ("https://app.example:8443", "null")
    for bad in ["app.example", "https://app.example/path", "https://app.example/?q", 5]:
        with pytest.raises(ConfigError, match="cors_origins"):
            build_config({"server": {"cors_origins": [bad]}})


def test_every_key_is_declared_once_by_its_field() -> None:
    """
    The keys each section takes, their reading and their defaults all come
    from the fields that declare them: every declared key has a reader, no
    key is declared twice, and etc/beacon.toml (the commented reference)
    names every one of them in its section.
    """
    from beacon.config._reading import reader_of
    from beacon.config._sections import SECTIONS, declared_keys

    declared = [(where, name) for where, name, _, _ in declared_keys()]
    assert len(declared) == len(set(declared))
    assert {where: {n for w, n in declared if w == where} for where, _ in declared} == SECTIONS
    for _, _, item, _ in declared_keys():
        assert callable(reader_of(item))
    reference = (ETC / "beacon.toml").read_text()
    where = ""
    named: set[tuple[str, str]] = set()
    for line in reference.splitlines():
        text = line.lstrip("# ").strip()
        if text.startswith("[") and text.endswith("]") and text[1:-1].isidentifier():
            where = text[1:-1]
        elif "=" in text and where:
            named.add((where, text.split("=", 1)[0].strip()))
    assert set(declared) - named == set()
