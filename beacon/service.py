"""
The service tree: store first, then the notifiers, then the listeners, so
that nothing is served before the store is open and the listeners stop (in
reverse order) before the notifiers, and those before the store drains and
closes. The notifiers are never on the submission path.

Embedders call L{makeService} with a L{Config} and their reactor, and add the
result to their application; or build L{beacon_resources} and mount them in
their own L{Site}.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, cast

from twisted.application.service import MultiService, Service
from twisted.internet.defer import Deferred, gatherResults, maybeDeferred
from twisted.internet.interfaces import IListeningPort, IReactorProcess, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.resource import Resource

from beacon.interfaces import IBeaconReactor
from beacon.bindings.http import (
    BeaconSite,
    SubmitterAuth,
    Container,
    PublicResources,
    TransportLimits,
    public_resources,
)
from beacon.bindings.admission import Ledger, RateLimiter, SourceResolver
from beacon.config import Config, ConfigError, validate
from beacon.errors import StartupError
from beacon.heap import HeapFreeze
from beacon.listeners import Listeners, derive_public_url
from beacon.monitoring import Monitoring
from beacon.bindings.operator import (
    BearerGate,
    OperatorSocket,
    PeerCheckedFactory,
    RootEndpoint,
    new_token,
    operator_of,
    socket_url,
    write_discovery_file,
)
from beacon.bindings.http import (
    DocumentResource,
    JSONRPCResource,
    PreparedDocument,
    RESTResource,
)
from beacon.bindings.http import NativeResources
from beacon.bindings.websocket import WebSocketFactory, WebSocketResource, WebSocketService
from beacon.notify import (
    CommandChannel,
    INotificationChannel,
    Notifier,
    SMTPChannel,
    check_options,
    smtp_trust_root,
)
from beacon.intake import (
    EXTENSION_DECLARATIONS,
    EXTENSION_METHODS,
    REST_PATH,
    OperatorPolicy,
    PublicPolicy,
    card_signing_keys,
    discovery_document,
    operator_card,
    public_card,
    schema_validator,
    signed_card,
)
from beacon.protocol import (
    HTTP_JSON_BINDING,
    JSONRPC_BINDING,
    PROTOCOL_VERSION,
    UNIX_BINDING,
    Dispatcher,
    websocket_url,
)
from beacon.signing import SigningKey
from beacon.store import ISubmissionStore, open_store, parse_store_url, sqlite_url

log = Logger()

#: The SQLite database's file name inside the data directory.
DATABASE_NAME = "beacon.sqlite3"


def store_url(config: Config) -> str:
    """
    The store URL C{config} names: its C{store_url}, or by default the
    SQLite database in its data directory (for C{beacon db} too).
    """
    if config.store_url:
        return config.store_url
    return sqlite_url(os.path.join(config.data_dir, DATABASE_NAME))


@dataclass
class BeaconResources:
    """
    The public resources of a Beacon (A2A and native), with what they need
    to be published.

    @ivar websocket: The WebSocket binding's factory, mounted at
        C{/a2a/ws} and used by C{--ws} listeners; start and stop it with a
        L{WebSocketService} (a L{Site} does not).
    @ivar grpc: The gRPC listeners the card lists; publish again after
        changing them.
    """

    a2a: PublicResources
    native: NativeResources
    config: Config
    clock: IReactorTime
    websocket: WebSocketFactory
    #: The gRPC binding's bound listeners (C{host:port}), listed on the card.
    grpc: list[str] = field(default_factory=list)
    #: The public URL the card was last published for.
    published: str | None = None
    #: The keys that sign the public card (C{[card] signing_key}), read once.
    signing: tuple[SigningKey, ...] = ()

    def mount(self, root: Resource) -> Resource:
        """
        Put every public resource into C{root}, beside what it holds, the
        landing page at C{/} too.
        """
        self.native.mount(self.a2a.mount(root))
        # WEBSOCKET_PATH, beside /a2a/v1 in the container a2a.mount made.
        root.children[b"a2a"].putChild(b"ws", WebSocketResource(self.websocket))
        # The landing page at /, made from the card.
        root.putChild(b"", self.a2a.landing)
        return root

    def publish(self, public_url: str) -> None:
        """
        Publish the agent card and the discovery document for C{public_url}.
        """
        self.published = public_url
        now = self.clock.seconds()
        limits = self.config.limits
        auth = self.config.auth
        card = public_card(
            self.config.card,
            public_url,
            websocket=True,
            api_keys=bool(auth.api_keys),
            bearer=bool(auth.bearer_tokens),
            grpc=tuple(self.grpc),
        )
        # Signed here, once per publication: serving stays prepared bytes.
        self.a2a.card.publish(signed_card(card, self.signing), now)
        self.native.discovery.publish(
            discovery_document(
                self.config.card,
                public_url,
                {
                    "maxBodyBytes": limits.max_body,
                    "ratePerSecond": limits.rate,
                    "burst": limits.burst,
                },
            ),
            now,
        )


def beacon_resources(
    config: Config, store: ISubmissionStore, reactor: IReactorTime
) -> BeaconResources:
    """
    Build Beacon's public resources over C{store}, for L{makeService} or for
    mounting in an existing L{Site} with C{mount(root)}. When the config has
    no public URL, call C{publish(url)} once it is known. Prefer
    L{BeaconSite} (or its request factory) so that the body cap holds while
    the body arrives.
    """
    validator = schema_validator()
    policy = PublicPolicy(store, reactor, validator)
    limits = TransportLimits(
        max_body=config.limits.max_body,
        rate=RateLimiter(config.limits.rate, config.limits.burst, reactor),
        sources=SourceResolver(config.limits.trusted_proxies),
        auth=SubmitterAuth.of(config.auth),
        cors_origins=frozenset(config.cors_origins),
    )
    dispatcher = Dispatcher(policy)
    result = BeaconResources(
        a2a=public_resources(dispatcher, limits),
        native=NativeResources(policy, limits, validator.schema, reactor.seconds()),
        config=config,
        clock=reactor,
        websocket=WebSocketFactory(
            dispatcher,
            limits,
            reactor,
            config.websocket,
            # [server] direct = false: autobahn reads and writes every frame.
            direct=None if config.direct else False,
        ),
        signing=card_signing_keys(config.card),
    )
    if config.public_url is not None:
        result.publish(config.public_url)
    return result


#: The operator policy's extension methods its HTTP+JSON interface also
#: serves as C{POST tasks/<id>:<verb>}, by verb.
OPERATOR_TASK_VERBS = {"decide": "beacon.review.Decide"}


@dataclass
class OperatorDoor:
    """
    The operator policy behind a root resource with its card, for one door.
    """

    root: Resource
    card: PreparedDocument


def operator_door(
    policy: OperatorPolicy,
    reactor: IReactorTime,
    name_card: Callable[[], dict[str, Any]] | None = None,
    *,
    source: Callable[[Any], str] = operator_of,
) -> OperatorDoor:
    """
    Build one operator door's resource tree: JSON-RPC at C{/}, the
    HTTP+JSON interface at C{/a2a/rest} (the same dispatcher; extension
    methods at C{extensions/<name>}, Decide at C{tasks/<id>:decide} too),
    the operator card at C{/.well-known/agent-card.json}. Publish the card
    with C{door.card.publish(...)} when its URL is known (or pass
    C{name_card}).
    """
    dispatcher = Dispatcher(policy, EXTENSION_METHODS)
    extensions = frozenset(e["uri"] for e in EXTENSION_DECLARATIONS)
    jsonrpc = JSONRPCResource(
        dispatcher,
        None,
        binding="operator",
        extensions=extensions,
        clock=reactor,
        source=source,
    )
    rest = RESTResource(
        dispatcher,
        None,
        binding="operator",
        extensions=extensions,
        task_verbs=OPERATOR_TASK_VERBS,
        clock=reactor,
        source=source,
    )
    card = PreparedDocument()
    root = RootEndpoint(jsonrpc)
    well_known = Container()
    well_known.putChild(b"agent-card.json", DocumentResource(card, max_age=0))
    root.putChild(b".well-known", well_known)
    # REST_PATH, as on the public listeners.
    a2a = Container()
    a2a.putChild(b"rest", rest)
    root.putChild(b"a2a", a2a)
    if name_card is not None:
        card.publish(name_card(), reactor.seconds())
    return OperatorDoor(root, card)


#: The start-up error of a gRPC listener without grpcio.
GRPC_EXTRA_MISSING = "[grpc] listen needs the grpc extra: pip install 'beacon-a2a[grpc]'"


class GRPCService(Service):
    """
    The gRPC binding's server as a service: bound and started in
    L{startService} (a listener that cannot bind fails the start), stopped
    gracefully in L{stopService} (in-flight calls answered within
    C{[grpc] grace}), before the store closes.
    """

    def __init__(self, server: Any, on_bound: Callable[[list[str]], None]) -> None:
        """
        @param server: A L{beacon.bindings.grpc.GRPCServer}.
        @param on_bound: Called with its listeners' C{host:port} once bound.
        """
        self.server = server
        self._on_bound = on_bound

    def startService(self) -> None:
        """
        @raise StartupError: A listener cannot bind.
        """
        self.server.start()
        super().startService()
        self._on_bound(list(self.server.urls))

    def stopService(self) -> Deferred[None]:
        super().stopService()
        stopped: Deferred[None] = self.server.stop()
        return stopped


def grpc_service(
    config: Config, beacon: BeaconResources, reactor: IBeaconReactor
) -> tuple[GRPCService, Any]:
    """
    The gRPC binding over C{beacon}'s dispatcher and public limits, for
    C{[grpc] listen}; its listeners join the card once bound.

    @return: The service and its L{beacon.bindings.grpc.GRPCCalls} (for
        the metrics).
    @raise StartupError: grpcio (the C{grpc} extra) is not installed.
    """
    try:
        from beacon.bindings.grpc import GRPCCalls, GRPCServer
    except ImportError as e:
        raise StartupError(f"{GRPC_EXTRA_MISSING} ({e})") from None
    options = config.grpc
    calls = GRPCCalls(beacon.websocket.dispatcher, beacon.websocket.limits)
    server = GRPCServer(
        calls,
        reactor,
        options.listen,
        max_receive=options.max_receive_message_length(config.limits.max_body),
        workers=options.workers,
        max_calls_per_source=options.max_calls_per_source,
        message_timeout=config.limits.body_timeout,
        idle_timeout=config.limits.idle_timeout,
        max_connection_age=options.max_connection_age or None,
        keepalive=options.keepalive or None,
        grace=options.grace,
        key_pem=options.key_pem,
        certificate_pem=options.certificate_pem,
        max_connections=config.limits.max_connections,
        max_connections_per_source=config.limits.max_connections_per_source,
        ledger=beacon.websocket.ledger,
    )

    def bound(urls: list[str]) -> None:
        beacon.grpc[:] = urls
        if beacon.published is not None:
            beacon.publish(beacon.published)

    return GRPCService(server, bound), calls


class _StreamEnder(Service):
    """
    Ends the operator's open streams when Beacon stops, so a follower sees
    its stream end normally instead of its connection break.
    """

    def __init__(self, policy: OperatorPolicy) -> None:
        self._policy = policy

    def stopService(self) -> None:
        super().stopService()
        self._policy.close_streams()


class DiscoveryFile(Service):
    """
    The bearer door's discovery file: written when Beacon starts (after
    twistd has shed its privileges, so the file is the running user's),
    once the door's port is bound and its URL known; removed when Beacon
    stops, if it is still the file written here.

    @ivar url: The door's URL, set once its port is bound.
    """

    def __init__(self, path: str, token: str) -> None:
        """
        @param path: Where the file goes.
        @param token: The door's bearer token.
        """
        self.path = path
        self.url: str | None = None
        self._token = token
        self._written: tuple[int, int] | None = None

    def startService(self) -> None:
        """
        Write the file (making the data directory, 0700, if need be).

        @raise StartupError: It cannot be written.
        """
        super().startService()
        if self.url is None or self._written is not None:
            return
        try:
            write_discovery_file(self.path, self.url, self._token)
            info = os.lstat(self.path)
        except OSError as e:
            raise StartupError(
                f"operator http: cannot write {self.path}: {e.strerror or e}"
            ) from None
        self._written = (info.st_dev, info.st_ino)
        log.info(
            "operator.http_listening: bearer door at {url}; token in {path}",
            url=self.url,
            path=self.path,
        )

    def stopService(self) -> None:
        """Remove the file, unless it is no longer the one written here."""
        super().stopService()
        written, self._written = self._written, None
        if written is None:
            return
        try:
            info = os.lstat(self.path)
        except FileNotFoundError:
            return
        if (info.st_dev, info.st_ino) == written:
            os.unlink(self.path)


def operator_site(
    root: Resource, config: Config, reactor: IBeaconReactor, ledger: Ledger | None = None
) -> BeaconSite:
    """
    The site of an operator door: twisted.web's channel from the first
    byte. The direct channel would only read each request's head to hand
    it over (the doors' resources are twisted.web's: the card, JSON-RPC
    with its event streams, the bearer gate), which costs a connection
    about 6 % more instructions than twisted.web alone (one ``review
    list`` a connection, measured with callgrind).
    """
    site = BeaconSite(root, clock=reactor, direct=False, **config.limits.site_options())
    site.noisy = False
    if ledger is not None:
        site.ledger = ledger
    return site


def _add_operator_doors(
    root: MultiService,
    config: Config,
    store: ISubmissionStore,
    reactor: IBeaconReactor,
    monitoring: Monitoring | None = None,
    ledger: Ledger | None = None,
) -> None:
    policy = OperatorPolicy(store, reactor)
    path = config.socket_path
    if path is not None:
        absolute = os.path.abspath(path)
        door = operator_door(
            policy,
            reactor,
            lambda: operator_card(
                config.card,
                [
                    {
                        "url": socket_url(absolute),
                        "protocolBinding": UNIX_BINDING,
                        "protocolVersion": PROTOCOL_VERSION,
                    }
                ],
                EXTENSION_DECLARATIONS,
            ),
        )
        site = operator_site(door.root, config, reactor, ledger)
        if monitoring is not None:
            monitoring.operator("operator_socket", site, door.root)
        OperatorSocket(reactor, absolute, PeerCheckedFactory(site, absolute)).setServiceParent(root)
    if config.operator_http:
        token = new_token()
        door = operator_door(policy, reactor, source=lambda request: "bearer")
        site = operator_site(BearerGate(door.root, token), config, reactor, ledger)
        if monitoring is not None:
            monitoring.operator("operator_http", site, door.root)
        discovery = DiscoveryFile(config.operator_discovery_file, token)

        def bound(ports: list[IListeningPort]) -> None:
            url = derive_public_url(config.operator_http, ports[0]) + "/"
            door.card.publish(
                operator_card(
                    config.card,
                    [
                        {
                            "url": url,
                            "protocolBinding": JSONRPC_BINDING,
                            "protocolVersion": PROTOCOL_VERSION,
                        },
                        {
                            "url": url + REST_PATH.lstrip("/"),
                            "protocolBinding": HTTP_JSON_BINDING,
                            "protocolVersion": PROTOCOL_VERSION,
                        },
                    ],
                    EXTENSION_DECLARATIONS,
                    bearer=True,
                ),
                reactor.seconds(),
            )
            discovery.url = url

        Listeners(reactor, (config.operator_http,), site, "operator", bound).setServiceParent(root)
        discovery.setServiceParent(root)
    _StreamEnder(policy).setServiceParent(root)


def notifiers(
    config: Config, store: ISubmissionStore, reactor: IBeaconReactor
) -> list[Notifier]:
    """
    The notifiers C{[notify]} asks for, over C{store}: one for the command,
    one for the mail, or none. They are not on the submission path: each
    hears of stored submissions from the store and reads them back from
    it.

    @raise StartupError: The command's program is not found, or the reactor
        cannot run processes.
    """
    notify = config.notify
    channels: list[INotificationChannel] = []
    if notify.command:
        if not IReactorProcess.providedBy(reactor):
            raise StartupError("[notify] command needs a reactor that runs processes")
        channels.append(CommandChannel(cast(IReactorProcess, reactor), notify.command))
    if notify.smtp:
        tls, host, port = notify.smtp_server
        channels.append(
            SMTPChannel(
                reactor,
                reactor,
                host,
                port,
                tls=tls,
                mail_from=notify.mail_from,
                mail_to=notify.mail_to,
                user=notify.smtp_user or None,
                password=notify.smtp_password if notify.smtp_user else None,
                connect_timeout=notify.timeout,
                trust_root=smtp_trust_root(notify.smtp_ca),
            )
        )
    return [
        Notifier(
            store,
            reactor,
            channel,
            interval=notify.interval,
            timeout=notify.timeout,
            include_content=notify.include_content,
        )
        for channel in channels
    ]


class DataDirectory(Service):
    """
    Checks, first of all at start, that the data directory is one (or not
    there yet: what needs it makes it): a file in its place stops start-up
    with that reason, rather than with the first file that cannot be made
    in it.
    """

    def __init__(self, path: str) -> None:
        self.path = path

    def startService(self) -> None:
        """
        @raise StartupError: Something other than a directory is at the path.
        """
        super().startService()
        if os.path.lexists(self.path) and not os.path.isdir(self.path):
            raise StartupError(
                f"the data directory {self.path} is not a directory; give --data (or"
                " [server] data) a directory, or a path where one can be made"
            )


class AllOrNothing(MultiService):
    """
    A L{MultiService} whose start is all or nothing: when a child fails to
    start (in L{privilegedStartService} or L{startService}), the children
    that had started (or bound, in L{privilegedStartService}) are stopped,
    newest first, before the error goes on. A failed start so leaves no
    port bound, no operator socket and no discovery file behind; what is
    on disk is removed at once (the reactor may never run: twistd exits).

    @ivar undone: After a failed start, a L{Deferred} that fires once every
        child stopped has finished stopping; otherwise None.
    """

    def __init__(self) -> None:
        super().__init__()
        self._begun: list[Any] = []
        self.undone: Deferred[None] | None = None

    # MultiService's own start would start every child, undoing nothing
    # when one fails: these replace it (a service starts by being running,
    # IService's public attribute, and has nothing to do before that).

    def privilegedStartService(self) -> None:
        for service in list(self):
            self._begin(service, service.privilegedStartService)

    def startService(self) -> None:
        self.running = 1
        for service in list(self):
            self._begin(service, service.startService)

    def stopService(self) -> Deferred[Any]:
        self._begun = []
        stopped: Deferred[Any] = super().stopService()
        return stopped

    def _begin(self, service: Any, start: Callable[[], None]) -> None:
        try:
            start()
        except BaseException:
            self._undo()
            raise
        if service not in self._begun:
            self._begun.append(service)

    def _undo(self) -> None:
        begun, self._begun = self._begun, []
        self.running = 0
        stopping = []
        for service in reversed(begun):
            stopped: Deferred[Any] = maybeDeferred(service.stopService)
            stopped.addErrback(_log_undo_failure, service)
            stopping.append(stopped)
        undone: Deferred[Any] = gatherResults(stopping)
        self.undone = undone.addCallback(lambda _: None)


def _log_undo_failure(failure: Failure, service: Any) -> None:
    log.failure(
        "beacon.start_undo_failed: stopping {service} after a failed start",
        failure,
        service=service,
    )


class _Announce(Service):
    """
    Logs the configuration Beacon started with, once the reactor runs (after
    the listeners, and once twistd's signal handlers are in place).
    """

    def __init__(
        self, config: Config, public_url: Callable[[], str], reactor: IBeaconReactor
    ) -> None:
        self._config = config
        self._public_url = public_url
        self._reactor = reactor

    def startService(self) -> None:
        super().startService()
        self._reactor.callWhenRunning(self._announce)

    def _announce(self) -> None:
        if not self.running:
            return
        log.info(
            "beacon.started: public URL {public_url}, data directory {data_dir}",
            public_url=self._public_url(),
            data_dir=os.path.abspath(self._config.data_dir),
        )


def check_config(config: Config) -> Config:
    """
    Check C{config} whole: its values (L{beacon.config.validate}), and
    what only the rooms that use them can say: that the store URL names a
    store (L{beacon.store.parse_store_url}) and that C{[notify]}'s program
    and CA certificates will do (L{beacon.notify.check_options}), that
    the card's signing keys are keys Beacon signs with
    (L{beacon.intake.card_signing_keys}).

    @return: C{config} as L{validate} normalises it.
    @raise ConfigError: For the first value that will not do.
    """
    config = validate(config)
    if config.store_url is not None:
        try:
            parse_store_url(config.store_url)
        except ValueError as e:
            raise ConfigError(f"[store] url: {e}") from None
    check_options(config.notify)
    # The card's signing keys: read now, so a bad one stops start-up.
    card_signing_keys(config.card)
    return config


def makeService(config: Config, reactor: IBeaconReactor) -> AllOrNothing:
    """
    Wire Beacon's service tree: the store, then the notifiers
    (C{[notify]}), then the public HTTP listeners,
    the WebSocket binding's factory (served at C{/a2a/ws} on them) and its
    own C{--ws} listeners, then the gRPC binding (C{[grpc] listen}), then
    the operator's doors, then a start-up
    announcement. Its start is all or nothing (L{AllOrNothing}).

    @param config: The configuration (checked again here: L{check_config}).
    @param reactor: The reactor everything runs on (listening, time,
        threads).
    """
    config = check_config(config)
    root = AllOrNothing()
    DataDirectory(os.path.abspath(config.data_dir)).setServiceParent(root)
    # SQLite in the data directory, or the PostgreSQL database several
    # instances share.
    store = open_store(store_url(config), reactor)
    store.setServiceParent(root)
    # Health checks and metrics (issue 20): handed each door below.
    monitoring = Monitoring(config, store, reactor)
    # Notifications start once the store has, and stop before it.
    for notifier in notifiers(config, store, reactor):
        notifier.setServiceParent(root)
        monitoring.notifier(notifier)

    beacon = beacon_resources(config, store, reactor)
    site = BeaconSite(
        beacon.mount(Container()),
        access_log=config.access_log,
        direct=config.direct,
        clock=reactor,
        **config.limits.site_options(),
    )
    site.noisy = False
    # Every door's connections share one ledger of reads: a connection's
    # turns grow only while no other connection of this Beacon is served.
    site.ledger = beacon.websocket.ledger
    public: dict[str, str] = {}
    if config.public_url:
        public["url"] = config.public_url

    def bound(ports: list[IListeningPort]) -> None:
        if "url" not in public:
            public["url"] = derive_public_url(config.http[0], ports[0])
            beacon.publish(public["url"])

    monitoring.public(site, beacon.websocket)
    Listeners(reactor, config.http, site, "http", bound).setServiceParent(root)
    WebSocketService(beacon.websocket).setServiceParent(root)
    if config.ws:

        def ws_bound(ports: list[IListeningPort]) -> None:
            for description, port in zip(config.ws, ports):
                url = websocket_url(derive_public_url(description, port)) + "/"
                log.info("ws.serving: the WebSocket binding at {url}", url=url)

        Listeners(reactor, config.ws, beacon.websocket, "ws", ws_bound).setServiceParent(root)
    if config.grpc.listen:
        # After the HTTP listeners (the card is published once they are
        # bound), stopped before the store closes.
        service, calls = grpc_service(config, beacon, reactor)
        monitoring.grpc(calls)
        service.setServiceParent(root)
    _add_operator_doors(root, config, store, reactor, monitoring, site.ledger)
    # After every listener: ready means bound too.
    monitoring.attach(root)
    _Announce(config, lambda: public.get("url", ""), reactor).setServiceParent(root)
    return root


__all__ = [
    "AllOrNothing",
    "BeaconResources",
    "DATABASE_NAME",
    "DataDirectory",
    "GRPC_EXTRA_MISSING",
    "GRPCService",
    "HeapFreeze",
    "Listeners",
    "OPERATOR_TASK_VERBS",
    "OperatorDoor",
    "StartupError",
    "beacon_resources",
    "check_config",
    "derive_public_url",
    "grpc_service",
    "makeService",
    "notifiers",
    "operator_door",
    "store_url",
]
