"""
C{twistd beacon}: the command-line options and the wiring. This is the edge
where the global reactor is imported.
"""

from __future__ import annotations

import os
from typing import Any, NoReturn

from twisted.application.service import IService, MultiService
from twisted.python import usage

from beacon.config import Config, ConfigError, build_config, read_file
from beacon.logs import use_fast_text_log
from beacon.service import HeapFreeze, StartupError
from beacon.store import StoreError


class Options(usage.Options):
    """
    Options of C{twistd beacon}. The command line overrides the file given
    with C{--config}; every value is checked here, before the reactor runs.
    """

    synopsis = "[options]"
    longdesc = (
        "Beacon: an A2A 1.0 front door for a human-read inbox. With no options "
        "it serves http://127.0.0.1:8080 and keeps its data in ./beacon-data."
    )
    optParameters = [
        ["config", "c", None, "A TOML configuration file (see etc/beacon.toml)."],
        ["data", "d", None, "The data directory [default: beacon-data]."],
        [
            "operator",
            None,
            None,
            "The operator's unix socket; empty disables it "
            "[default: <data>/operator.sock].",
        ],
        [
            "public-url",
            None,
            None,
            "The base URL the agent card advertises "
            "[default: derived from the first --http listener].",
        ],
        [
            "store",
            None,
            None,
            "The submission store: sqlite:///PATH, or "
            "postgresql://user@host:port/database to share one database "
            "between several Beacons (the password from the URL, PGPASSWORD "
            "or a passfile) [default: <data>/beacon.sqlite3].",
        ],
    ]

    def __init__(self) -> None:
        super().__init__()
        self["http"] = []
        self["ws"] = []
        self.config: Config | None = None

    def opt_http(self, description: str) -> None:
        """
        A public HTTP listener, as a Twisted server endpoint string
        (repeatable; ssl: gives HTTPS) [default: tcp:8080:interface=127.0.0.1].
        """
        self["http"].append(description)

    def opt_ws(self, description: str) -> None:
        """
        A listener of the A2A WebSocket binding's own, as a Twisted server
        endpoint string (repeatable; ssl: gives wss://), beside /a2a/ws on
        every --http listener [default: none].
        """
        self["ws"].append(description)

    def postOptions(self) -> None:
        """
        Build and check the configuration; a bad value is a usage error.
        """
        try:
            values = read_file(self["config"]) if self["config"] else {}
            config = build_config(
                values,
                data_dir=self["data"],
                http=self["http"],
                ws=self["ws"],
                public_url=self["public-url"],
                operator_socket=self["operator"],
                store_url=self["store"],
            )
        except ConfigError as e:
            raise usage.UsageError(str(e)) from None
        _check_endpoints(config.http)
        _check_endpoints(config.ws, "--ws")
        self.config = config
        # twistd's log file, in twistd's format, written faster (see
        # beacon.logs); --logger and --syslog still win.
        use_fast_text_log(getattr(self, "parent", None))


def _check_endpoints(descriptions: tuple[str, ...], option: str = "--http") -> None:
    from twisted.internet import reactor
    from twisted.internet.endpoints import serverFromString

    for description in descriptions:
        try:
            serverFromString(reactor, description)
        except Exception as e:
            raise usage.UsageError(
                f"{option} {description!r} is not a server endpoint: {e}"
            ) from None


class _StartupGuard(MultiService):
    """
    The root under twistd: a start-up failure (a listener that cannot bind, a
    store that cannot open) ends twistd with its one-line message instead of
    a traceback, and removes the pidfile twistd wrote for this process (twistd
    itself removes it only after a reactor run).
    """

    def __init__(self, twistd_options: Any = None) -> None:
        """
        @param twistd_options: twistd's own options (for C{--pidfile}), if
            any.
        """
        super().__init__()
        self._twistd_options = twistd_options

    def privilegedStartService(self) -> None:
        try:
            super().privilegedStartService()
        except (StartupError, StoreError) as e:
            self._fail(e)

    def startService(self) -> None:
        try:
            super().startService()
        except (StartupError, StoreError) as e:
            self._fail(e)

    def _fail(self, error: Exception) -> NoReturn:
        self._remove_pidfile()
        raise SystemExit(f"beacon: cannot start: {error}") from None

    def _remove_pidfile(self) -> None:
        options = self._twistd_options
        path = options.get("pidfile") if hasattr(options, "get") else None
        if not path:
            return
        try:
            with open(path) as pidfile:
                written = int(pidfile.read().strip())
            if written == os.getpid():
                os.unlink(path)
        except (OSError, ValueError):
            pass


def makeService(options: Options) -> IService:
    """
    Wire the service tree from the checked configuration.
    """
    from twisted.internet import reactor

    from beacon.service import makeService as make

    assert options.config is not None
    guard = _StartupGuard(getattr(options, "parent", None))
    make(options.config, reactor).setServiceParent(guard)
    HeapFreeze(reactor).setServiceParent(guard)
    return guard
