"""
The operator's doors: the JSON-RPC over unix socket binding (agentd's) and,
for hosts without unix sockets, a loopback HTTP door gated by a bearer token.

Wire contract of the socket (binding C{https://agentd.dev/a2a/binding/jsonrpc-unix},
interface URL C{unix:///<absolute path>})::

    The A2A JSON-RPC binding as HTTP/1.1 over a unix stream socket, unchanged:
    POST /                             JSON-RPC (streams as text/event-stream)
    GET  /.well-known/agent-card.json  the operator card
    A2A-Version on every request; A2A-Extensions echoed when activated.
    The Host header means nothing.

Who may connect is the kernel's answer, not a header's:

  - the socket is born with mode 0600 (bound while the umask is 0177, by
    Twisted's unix port asked for mode 0600) and listens only then, so no
    other user can reach it even for a moment;
  - every connection's peer credentials are read with C{SO_PEERCRED}; only the
    daemon's own uid, or root, is served; any other connection is closed
    before a byte of HTTP is read and logged as C{a2a.unix.denied};
  - a stale socket (a socket file nothing answers on) is replaced; a live one
    stops start-up; anything else at the path (a file, a directory, a
    symlink) is never followed or replaced: start-up stops.

The bearer door answers every request, the card included, only with
C{Authorization: Bearer <token>} (a per-boot token of 256 random bits,
compared in constant time); otherwise HTTP 401 with C{WWW-Authenticate:
Bearer} and a JSON-RPC error body (code -31401), or under C{/a2a/rest} the
HTTP+JSON binding's google.rpc.Status (UNAUTHENTICATED).

Both doors also serve the HTTP+JSON binding under C{/a2a/rest}, the operator
policy's extension methods at C{POST /a2a/rest/extensions/<method>}. Its URL and token are written
to a 0600 discovery file once the port is bound, and removed on stop.
"""

from __future__ import annotations

import errno
from collections import Counter
import hmac
import json
import os
import secrets
import socket
import stat
import struct
import tempfile
from typing import Any, Callable

from twisted.application.service import Service
from twisted.internet import tcp, unix
from twisted.internet.defer import Deferred, maybeDeferred, succeed
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IListeningPort, IReactorTime, ITransport
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory
from twisted.python.failure import Failure
from twisted.web import server
from twisted.web.resource import IResource, Resource

from beacon.interfaces import IBeaconReactor
from beacon.bindings.admission import NotFound, RefusalShape, native_refusal, refusal_shape
from beacon.errors import StartupError
from beacon.throttle import LogThrottle
from beacon.protocol import ERROR_INFO_TYPE, dumps

log = Logger()

#: The longest unix socket path the kernel accepts (sun_path, with its NUL).
MAX_SOCKET_PATH = 107
#: The most uids whose C{a2a.unix.denied} lines are throttled one by one;
#: beyond, the others share one line a minute.
MAX_DENIED_UIDS = 1000
_PEERCRED = struct.Struct("3i")


def socket_url(path: str) -> str:
    """The C{unix:///...} interface URL of a socket path."""
    return "unix://" + os.path.abspath(path)


def peer_credentials(transport: ITransport) -> tuple[int, int, int] | None:
    """
    The C{(pid, uid, gid)} of a unix stream transport's peer, read with
    C{SO_PEERCRED}; None when the transport has no such socket.
    """
    handle = getattr(transport, "getHandle", lambda: None)()
    if not isinstance(handle, socket.socket) or handle.family != socket.AF_UNIX:
        return None
    raw = handle.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    pid, uid, gid = _PEERCRED.unpack(raw)
    return pid, uid, gid


class _PeerCheckedProtocol(ProtocolWrapper):
    """
    Serves an allowed peer with a protocol from the wrapped factory, built
    only once the peer's credentials are checked; closes any other
    connection before a byte is read. A denied connection never reaches the
    wrapped factory, so it holds none of what the factory counts or limits
    (a L{BeaconSite}'s connection caps).
    """

    denied = False
    peer_uid: int | None = None

    def __init__(self, factory: PeerCheckedFactory, addr: Any) -> None:
        # No wrapped protocol until the peer is known (see makeConnection).
        super().__init__(factory, Protocol())
        self._addr = addr

    def makeConnection(self, transport: ITransport) -> None:
        factory: PeerCheckedFactory = self.factory  # type: ignore[assignment]
        credentials = factory.credentials(transport)
        if credentials is None or credentials[1] not in factory.allowed_uids:
            self.denied = True
            self.transport = transport
            pid, uid = (credentials[0], credentials[1]) if credentials else (-1, -1)
            factory.denied(uid, pid)
            transport.loseConnection()
            return
        wrapped = factory.wrappedFactory.buildProtocol(self._addr)
        if wrapped is None:
            # The wrapped factory refused the connection: close it, as a
            # listening port does.
            self.denied = True
            self.transport = transport
            transport.loseConnection()
            return
        self.wrappedProtocol = wrapped
        self.peer_uid = credentials[1]
        self.peer_pid = credentials[0]
        super().makeConnection(transport)

    def dataReceived(self, data: bytes) -> None:
        if not self.denied:
            super().dataReceived(data)

    def connectionLost(self, reason: Failure | None = None) -> None:  # type: ignore[override]
        if self.denied:
            # Never registered with the factory, never connected onwards.
            return
        super().connectionLost(reason)


class PeerCheckedFactory(WrappingFactory["_PeerCheckedProtocol"]):
    """
    Wraps a factory so that only connections from allowed uids reach it: the
    wrapped factory builds a protocol only for a connection whose peer is
    allowed.
    """

    protocol = _PeerCheckedProtocol

    def __init__(
        self,
        wrapped: Any,
        path: str,
        allowed_uids: frozenset[int] | None = None,
        credentials: Callable[[ITransport], tuple[int, int, int] | None] = peer_credentials,
        clock: IReactorTime | None = None,
    ) -> None:
        """
        @param wrapped: The factory to protect (the operator's Site).
        @param path: The socket path, for log messages.
        @param allowed_uids: Who is served; the daemon's own uid and root
            by default.
        @param credentials: Reads a transport's peer credentials.
        @param clock: Times how often a refused uid is logged (by default
            the wrapped site's reactor; without one, every refusal is).
        """
        super().__init__(wrapped)
        self.path = path
        self._allowed_uids = allowed_uids
        self.credentials = credentials
        clock = clock if clock is not None else getattr(wrapped, "reactor", None)
        self._denials = (
            LogThrottle(clock, self._denied_since, max_kinds=MAX_DENIED_UIDS, overflow="other")
            if clock is not None
            else None
        )

    def denied(self, uid: int, pid: int) -> None:
        """
        A connection from C{uid} (process C{pid}) was closed unserved: log
        it (C{a2a.unix.denied}), a uid's first at once, then at most one line
        a minute per uid, counting those since.
        """

        def say() -> None:
            log.warn(
                "a2a.unix.denied: closed a connection from uid {uid} (pid {pid}) to {path}",
                uid=uid,
                pid=pid,
                path=self.path,
            )

        if self._denials is None:
            say()
        else:
            self._denials.note(str(uid), "", say)

    def _denied_since(self, uid: str, held: Counter[str]) -> None:
        log.warn(
            "a2a.unix.denied: closed {count} more connections from uid {uid} to {path} since "
            "the last line",
            count=sum(held.values()),
            uid=uid,
            path=self.path,
        )

    def doStop(self) -> None:
        """Stopped listening: log what the throttled lines have counted."""
        super().doStop()
        if self._denials is not None:
            self._denials.stop()

    @property
    def allowed_uids(self) -> frozenset[int]:
        """
        Who is served: those given, or the daemon's own uid (as it is now:
        after twistd's C{--uid}) and root.
        """
        if self._allowed_uids is not None:
            return self._allowed_uids
        return frozenset({os.getuid(), 0})

    def buildProtocol(self, addr: Any) -> _PeerCheckedProtocol:
        """
        A wrapper for a new connection; the wrapped factory is asked for its
        protocol only when the peer turns out to be allowed.
        """
        return _PeerCheckedProtocol(self, addr)


def operator_of(request: server.Request) -> str:
    """
    Name the operator behind a request on the socket: C{uid:<n>}.
    """
    transport = getattr(request.channel, "transport", None)
    uid = getattr(transport, "peer_uid", None)
    return f"uid:{uid}" if uid is not None else "operator"


class SocketInUse(Exception):
    """Something already occupies the socket path."""


def _check_path(path: str) -> None:
    """
    Make way for a new socket at C{path}: remove a stale socket; refuse a
    live one or anything that is not a socket.

    @raise SocketInUse: The path is taken.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise SocketInUse(f"{path} is a symbolic link; refusing to follow or replace it")
    if not stat.S_ISSOCK(info.st_mode):
        raise SocketInUse(f"{path} exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except OSError as e:
        if e.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise SocketInUse(
                f"cannot tell whether {path} is in use: {e.strerror or e}"
            ) from None
    else:
        raise SocketInUse(f"another process (another Beacon?) is answering on {path}{_beside(path)}")
    finally:
        probe.close()
    os.unlink(path)
    log.info("a2a.unix.stale_removed: removed a stale socket at {path}", path=path)


def _beside(path: str) -> str:
    """
    What to do to run another Beacon beside the one answering on C{path}:
    give it a data directory of its own (named, next to this one).
    """
    directory = os.path.dirname(os.path.abspath(path))
    other = f"{directory.rstrip(os.sep) or os.sep}-2"
    return (
        f"; to run a second Beacon on this host, give it a data directory of its own,"
        f" for example --data {other} (and twistd --pidfile={other}.pid),"
        " or another --operator socket"
    )


def make_way(path: str) -> None:
    """
    Make ready to bind a socket at C{path}: its directory exists (made
    0700 if missing) and nothing is at the path (a stale socket is removed).

    @raise SocketInUse: The path is taken (see L{_check_path}).
    @raise OSError: The path is too long, or the directory cannot be made.
    """
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise OSError(errno.ENAMETOOLONG, f"socket path is longer than {MAX_SOCKET_PATH} bytes")
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    _check_path(path)


class _KeptPathPort(unix.Port):
    """
    Twisted's unix L{unix.Port}, except that it does not unlink its path
    when it closes: by then the path may name someone else's socket, and an
    unlink that fails there would leave the port open. L{OperatorSocket}
    removes the path itself, at once on stop and only while it is still the
    socket it made.
    """

    def connectionLost(self, reason: Any) -> None:
        # unix.Port.connectionLost is the path's unlink, then this.
        tcp.Port.connectionLost(self, reason)


class OperatorSocket(Service):
    """
    The operator's unix socket as a service: bound (safely) at start,
    removed at stop.

    It is bound in L{startService}, never in L{privilegedStartService}: a
    unix socket needs no privilege, and twistd switches to C{--uid} and
    C{--gid} between the two, so the socket (and the data directory made
    for it) belongs to the user Beacon runs as, who can remove it on stop,
    and whom C{SO_PEERCRED} then admits.

    The socket is bound by Twisted's unix port, built for the path with mode
    0600, while the process's umask is 0177: it is born 0600 (and the
    port's chmod to 0600 changes nothing); the port listens only after
    that, so nobody can connect to a socket with a wider mode at any moment.
    Binding never replaces what is at the path (a socket that appeared
    after the check stops start-up).
    """

    def __init__(self, reactor: IBeaconReactor, path: str, factory: Any) -> None:
        """
        @param reactor: A reactor with unix socket support.
        @param path: Where the socket goes.
        @param factory: The (peer-checked) factory that serves it.
        """
        self._reactor = reactor
        self.path = os.path.abspath(path)
        self._factory = factory
        self._port: IListeningPort | None = None
        self._inode: tuple[int, int] | None = None

    def startService(self) -> None:
        """
        Bind the socket.

        @raise beacon.errors.StartupError: It cannot be bound.
        """
        super().startService()
        if self._port is not None:
            return

        try:
            make_way(self.path)
            port = self._listen()
        except SocketInUse as e:
            log.critical("a2a.unix.listen_failed: {reason}", reason=str(e))
            raise StartupError(f"operator socket: {e}") from None
        except OSError as e:
            reason = e.strerror or str(e)
            log.critical(
                "a2a.unix.listen_failed: cannot listen on {path}: {reason}",
                path=self.path,
                reason=reason,
            )
            raise StartupError(f"operator socket: cannot listen on {self.path}: {reason}") from None
        self._port = port
        log.info("a2a.unix.listening: operator socket {path}", path=self.path)

    def _listen(self) -> IListeningPort:
        """
        Bind and listen at the path, with mode 0600 from birth.

        @raise OSError: It cannot be bound.
        """
        port = _KeptPathPort(
            self.path, self._factory, 128, 0o600, self._reactor  # type: ignore[arg-type]
        )
        old_umask = os.umask(0o177)
        try:
            port.startListening()
        except CannotListenError as e:
            error = e.socketError
            if isinstance(error, OSError):
                raise error from None
            raise OSError(errno.EADDRNOTAVAIL, str(error)) from None
        finally:
            os.umask(old_umask)
        try:
            info = os.lstat(self.path)
        except BaseException:
            port.stopListening()
            raise
        self._inode = (info.st_dev, info.st_ino)
        return port

    def stopService(self) -> Deferred[None]:
        """
        Remove the socket (if it is still ours), at once: no new connection
        can reach it, and it is gone even if the reactor never runs again (a
        failed start); then stop listening.
        """
        super().stopService()
        port, self._port = self._port, None
        stopped: Deferred[Any] = maybeDeferred(port.stopListening) if port else succeed(None)
        self._remove()
        return stopped.addCallback(lambda _: None)

    def _remove(self) -> None:
        """
        Unlink the socket path if it still names the socket bound here; if
        that fails, say so (C{a2a.unix.remove_failed}).
        """
        inode, self._inode = self._inode, None
        if inode is None:
            return
        try:
            info = os.lstat(self.path)
            if (info.st_dev, info.st_ino) == inode:
                os.unlink(self.path)
        except FileNotFoundError:
            return
        except OSError as e:
            log.warn(
                "a2a.unix.remove_failed: cannot remove {path}: {reason}",
                path=self.path,
                reason=e.strerror or str(e),
            )


class BearerGate(Resource):
    """
    Lets a request through to C{resource} only with the right bearer token;
    answers anything else with 401, C{WWW-Authenticate: Bearer} and the
    body of the binding the request was for: JSON-RPC's error (-31401, as
    that binding maps it), or for a resource with a refusal shape of its
    own (the HTTP+JSON interface) that shape (a google.rpc.Status).
    """

    isLeaf = False

    def __init__(self, resource: IResource, token: str) -> None:
        super().__init__()
        self._resource = resource
        self._expected = b"Bearer " + token.encode("ascii")
        # Whoever reads the tree (the refusal shapes of requests not yet
        # whole) sees the guarded resource's children; requests reach them
        # only through the gate.
        self.children = getattr(resource, "children", {})

    def _authorized(self, request: server.Request) -> bool:
        given = request.getHeader(b"Authorization") or b""
        return hmac.compare_digest(given, self._expected)

    def getChildWithDefault(self, path: bytes, request: server.Request) -> IResource:
        if not self._authorized(request):
            return _Unauthorized(self._shape(request))
        # Traversal moved C{path} onto prepath; put it back, so that the
        # guarded resource sees the request as if the gate were not there.
        assert request.prepath is not None and request.postpath is not None
        request.prepath.pop()
        request.postpath.insert(0, path)
        return self._resource

    def render(self, request: server.Request) -> bytes:
        return _Unauthorized(self._shape(request)).render(request)

    def _shape(self, request: server.Request) -> RefusalShape:
        """The refusal shape of the guarded resource the request was for."""
        segments = (request.prepath or []) + (request.postpath or [])
        return refusal_shape(self._resource, b"/" + b"/".join(segments))


class _Unauthorized(Resource):
    isLeaf = True

    def __init__(self, shape: RefusalShape) -> None:
        super().__init__()
        self._shape = shape

    def render(self, request: server.Request) -> bytes:
        # Counted on the door's site (a BeaconSite's refusals).
        refusals = getattr(getattr(request, "site", None), "refusals", None)
        if refusals is not None:
            refusals["unauthenticated"] += 1
        request.setResponseCode(401)
        challenge = b'Bearer realm="beacon-operator"'
        request.setHeader(b"WWW-Authenticate", challenge)
        request.setHeader(b"Content-Type", b"application/json")
        message = "a bearer token is required (see the operator discovery file)"
        if self._shape is not native_refusal:
            return self._shape(401, "unauthenticated", message, {b"WWW-Authenticate": challenge})
        return dumps(
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {
                    "code": -31401,
                    "message": message,
                    "data": [
                        {
                            "@type": ERROR_INFO_TYPE,
                            "reason": "UNAUTHENTICATED",
                            "domain": "a2a-protocol.org",
                        }
                    ],
                },
            }
        )


def new_token() -> str:
    """A per-boot bearer token: 256 random bits, URL-safe."""
    return secrets.token_urlsafe(32)


def write_discovery_file(path: str, url: str, token: str) -> None:
    """
    Write C{{"url": ..., "token": ...}} to C{path}, readable by this user
    only (created 0600, then renamed into place); its directory (the data
    directory) is made, 0700, if it does not exist yet.
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=".operator-http-", dir=directory)
    try:
        os.fchmod(descriptor, 0o600)
        with os.fdopen(descriptor, "w") as f:
            json.dump({"url": url, "token": token}, f)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


class RootEndpoint(Resource):
    """
    Puts a JSON-RPC resource at the root path C{/} (the interface URL names
    the socket, so the path is the root), with other resources beside it
    (the card under C{/.well-known/}).
    """

    def __init__(self, endpoint: IResource) -> None:
        super().__init__()
        self._endpoint = endpoint

    def getChild(self, path: bytes, request: server.Request) -> IResource:
        if path == b"":
            return self._endpoint
        return NotFound()

    def render(self, request: server.Request) -> Any:
        return self._endpoint.render(request)

