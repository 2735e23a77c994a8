"""
C{twistd beacon}: the command-line options and the wiring. This is the edge
where the global reactor is imported.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Callable, NoReturn

from twisted.application.service import IService, MultiService
from twisted.logger import ILogObserver, Logger
from twisted.python import usage

from beacon import __version__
from beacon.config import Config, ConfigError, build_config, did_you_mean, read_file
from beacon.logs import offer_log_observer, twistd_log_observer
from beacon.errors import StartupError
from beacon.heap import HeapFreeze
from beacon.store import StoreError

log = Logger()


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
        self["grpc"] = []
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

    def opt_grpc(self, address: str) -> None:
        """
        A listener of the A2A gRPC binding, host:port (a port alone:
        127.0.0.1); repeatable, replacing [grpc] listen; needs the grpc
        extra [default: none].
        """
        self["grpc"].append(address)

    def opt_version(self) -> NoReturn:
        """
        Print Beacon's version (and Twisted's) and exit.
        """
        from twisted import __version__ as twisted_version

        sys.stdout.write(f"beacon {__version__} (Twisted {twisted_version})\n")
        sys.stdout.flush()
        raise SystemExit(0)

    def parseOptions(self, options: list[str] | None = None) -> None:
        """
        Parse the options. A mistake is a L{usage.UsageError} whose message
        says what to do (the near option, for a misspelt one). Under twistd
        it is written first, as one line on standard error, and twistd
        exits 1 without printing its thirty lines of usage after it.
        """
        try:
            super().parseOptions(options)
        except usage.UsageError as e:
            message = _explain(str(e), self.longOpt, getattr(self, "parent", None))
            if getattr(self, "parent", None) is None:
                raise usage.UsageError(message) from None
            sys.stdout.flush()
            sys.stderr.write(
                f"twistd beacon: {message}\n"
                "(twistd beacon --help lists the options)\n"
            )
            sys.stderr.flush()
            raise SystemExit(1) from None

    def postOptions(self) -> None:
        """
        Build and check the configuration; a bad value is a usage error.
        """
        from beacon.service import check_config

        try:
            values = read_file(self["config"]) if self["config"] else {}
            config = build_config(
                values,
                data_dir=self["data"],
                http=self["http"],
                ws=self["ws"],
                grpc=self["grpc"],
                public_url=self["public-url"],
                operator_socket=self["operator"],
                store_url=self["store"],
            )
            config = check_config(config)
        except ConfigError as e:
            raise usage.UsageError(str(e)) from None
        _check_endpoints(config.http)
        _check_endpoints(config.ws, "--ws")
        self.config = config


#: getopt's words for an option it does not know.
_UNKNOWN_OPTION = re.compile(r"\Aoption (--?)([^ ]+) not (?:recognized|a unique prefix)\Z")


def _explain(message: str, long_options: list[str], twistd: Any) -> str:
    """
    A usage error's message, with what to do about a misspelt option: the
    near option of C{twistd beacon}, or, for one of twistd's own given
    after C{beacon}, where it goes.
    """
    unknown = _UNKNOWN_OPTION.match(message)
    if unknown is None:
        return message
    dashes, name = unknown.groups()
    given = dashes + name
    if twistd is not None:
        ours = {o.rstrip("=") for o in long_options}
        theirs = {o.rstrip("=") for o in getattr(twistd, "longOpt", [])} - ours
        short = getattr(twistd, "shortOpt", "")
        if (dashes == "--" and name in theirs) or (dashes == "-" and name[:1] in short):
            example = given
            if f"{name}=" in getattr(twistd, "longOpt", []):
                example += "=..."
            elif dashes == "-" and f"{name[:1]}:" in short:
                example += " ..."
            return (
                f"{message}: {given} is an option of twistd's own;"
                f" give it before beacon (twistd {example} beacon ...)"
            )
    if dashes == "--":
        near = did_you_mean(name, [o.rstrip("=") for o in long_options])
        if near:
            return f"{message} (did you mean --{near}?)"
    return message


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


class StartupFailed(SystemExit, Exception):
    """
    C{twistd beacon} cannot start; C{str()} says why in one line.

    It is both kinds of exception on purpose. As an L{Exception} out of
    twistd's start of the application, twistd handles it as any start-up
    failure: it removes its pidfile and, daemonized, reports it to the
    parent process waiting for the start, which prints it and exits 1 (as
    C{twistd web} does on a port in use). As a L{SystemExit} (status 1),
    once twistd lets it go, it ends the process without a traceback.
    """

    def __init__(self, reason: str) -> None:
        SystemExit.__init__(self, 1)
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


def _keep_stderr() -> int | None:
    """
    A copy of the process's standard error as it is now, before twistd
    daemonizes (which points standard error at /dev/null) or sends it to
    the log: where the reason of a failed start is written for whoever
    started twistd. Not inherited by programs run later.
    """
    try:
        return os.dup(2)
    except OSError:
        return None


class _StartupGuard(MultiService):
    """
    The root under twistd: a start-up failure (a listener that cannot bind, a
    store that cannot open) ends twistd with exit status 1 and its one-line
    reason, on the standard error twistd was started with (in daemon mode
    too) and in the log as C{beacon.start_failed}, instead of a traceback;
    twistd removes its pidfile, and the tree below has undone what had
    started (L{beacon.service.AllOrNothing}). Standard error is let go once
    the start succeeds.

    Made the child of twistd's application, it offers the application its
    log observer (L{beacon.logs.offer_log_observer}).
    """

    def __init__(
        self,
        stderr: int | None = None,
        log_observer: Callable[[], ILogObserver | None] | None = None,
    ) -> None:
        """
        @param stderr: A file descriptor this service owns, for the reason
            of a failed start (L{_keep_stderr}); closed once the start
            succeeds or has failed.
        @param log_observer: Makes the observer twistd is to log through
            (None: twistd's own choice).
        """
        super().__init__()
        self._stderr = stderr
        self._log_observer = log_observer

    def setServiceParent(self, parent: Any) -> None:
        super().setServiceParent(parent)
        if self._log_observer is not None:
            offer_log_observer(parent, self._log_observer)

    def privilegedStartService(self) -> None:
        try:
            super().privilegedStartService()
        except (StartupError, StoreError) as e:
            self._fail(e)
        except Exception as e:
            self._unexpected(e)
            raise

    def startService(self) -> None:
        try:
            super().startService()
        except (StartupError, StoreError) as e:
            self._fail(e)
        except Exception as e:
            self._unexpected(e)
            raise
        self._tell(None)

    def _fail(self, error: Exception) -> NoReturn:
        self.running = 0
        reason = " ".join(str(error).split("\n"))
        log.critical("beacon.start_failed: {reason}", reason=reason)
        self._tell(f"beacon: cannot start: {reason}")
        raise StartupFailed(reason) from None

    def _unexpected(self, error: Exception) -> None:
        # A bug, not a condition: twistd logs the traceback; say where it is.
        self._tell(
            f"beacon: cannot start: {type(error).__name__}: {error}"
            " (the traceback is in the log)"
        )

    def _tell(self, line: str | None) -> None:
        """Write C{line} to the kept standard error, if any, and let it go."""
        descriptor, self._stderr = self._stderr, None
        if descriptor is None:
            return
        try:
            if line is not None:
                os.write(descriptor, line.encode("utf-8", "backslashreplace") + b"\n")
        except OSError:
            pass
        finally:
            os.close(descriptor)


def makeService(options: Options) -> IService:
    """
    Wire the service tree from the checked configuration.
    """
    assert options.config is not None
    twistd = getattr(options, "parent", None)
    return _guarded(options.config, twistd)


def _guarded(config: Config, twistd: Any = None, stderr: int | None = None) -> IService:
    """
    The service tree for C{config} under the start-up guard, and the
    start-up heap frozen once it has started. Under C{twistd beacon}
    (C{twistd}, its options), standard error is kept for the reason of a
    failed start and twistd's log is offered Beacon's observer.
    """
    from twisted.internet import reactor as global_reactor

    from beacon.interfaces import beacon_reactor
    from beacon.service import makeService as make

    reactor = beacon_reactor(global_reactor)
    if twistd is None:
        guard = _StartupGuard(stderr)
    else:
        # twistd's log, in twistd's format, written faster (beacon.logs);
        # --logger and --syslog still win.
        guard = _StartupGuard(
            _keep_stderr(), lambda: twistd_log_observer(twistd, reactor)
        )
    make(config, reactor).setServiceParent(guard)
    HeapFreeze(reactor).setServiceParent(guard)
    return guard


def application(config_file: str) -> Any:
    """
    The application a C{.tac} file hands to C{twistd -y} (see
    C{etc/beacon.tac}): the service tree of C{twistd beacon}, configured by
    the TOML file C{config_file}, under the same start-up guard. A
    configuration error ends twistd at once, and a failure to start (a
    port in use, a store that cannot open) when it starts, both with exit
    status 1 and the one-line reason on standard error
    (C{beacon: cannot start: ...}), no traceback.
    """
    from twisted.application.service import Application

    from beacon.service import check_config

    try:
        config = check_config(build_config(read_file(config_file)))
    except ConfigError as e:
        # Before twistd begins its log: standard error is where it is read.
        reason = " ".join(str(e).split("\n"))
        sys.stderr.write(f"beacon: cannot start: {config_file}: {reason}\n")
        sys.stderr.flush()
        # Not an Exception: twistd would print the traceback of one.
        raise SystemExit(1) from None
    made = Application("beacon")
    _guarded(config, stderr=_keep_stderr()).setServiceParent(made)
    return made
