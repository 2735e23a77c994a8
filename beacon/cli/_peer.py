"""
The peer commands: C{beacon card}, C{send} and C{task} against any A2A 1.0
agent (Beacon, the a2a-sdk's, any other), each bounded as a whole by
C{--timeout}; their options and their one-line errors.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from typing import IO, Any, TypeVar
from urllib.parse import urlsplit

from twisted.internet.defer import Deferred

from beacon.interfaces import IBeaconReactor
from beacon.cli._options import duration
from beacon.cli._text import Output, card_lines, dig, inert, json_text, task_lines, violations
from beacon.client import (
    BINDINGS,
    DEFAULT_PREFERENCE,
    A2AClient,
    ClientError,
    Deadline,
    GRPC_EXTRA,
    GRPCStatusError,
    HTTPStatusError,
    AgentCard,
    InvalidResponse,
    InvalidURL,
    KeyFileError,
    NoCompatibleInterface,
    RequestTooLarge,
    RPCError,
    Timeout,
    Timeouts,
    TransportError,
    UnverifiedCard,
    card_url,
    check_card_signature,
    check_url,
    fetch_card,
    grpc_installed,
    load_verification_keys,
    outcome_of,
    select_interface,
    text_message,
)

#: How long a peer command may take by default, in seconds.
DEFAULT_PEER_TIMEOUT = 30.0
#: How long connecting may take by default, in seconds.
DEFAULT_CONNECT_TIMEOUT = 10.0
#: Exit code of a command that ran out of time.
EXIT_TIMEOUT = 3
#: Exit code of a command whose agent card is not signed by a key of
#: C{--verify} (nothing was sent).
EXIT_UNVERIFIED = 4


def describe_peer(error: ClientError) -> str:
    """One line saying what went wrong talking to an agent (without C{beacon:})."""
    too_large = _too_large(error)
    if too_large is not None:
        return too_large
    if isinstance(error, TransportError):
        return f"cannot reach the agent at {inert(error.address)}: {inert(error.reason)}"
    if isinstance(error, RPCError):
        reason = f", {inert(error.reason)}" if error.reason else ""
        details = violations(error)
        message = inert(error.message)
        if details:
            message += f": {details}"
        return f"the agent refused the request: {message} (error {error.code}{reason})"
    if isinstance(error, GRPCStatusError):
        reason = f", {inert(error.reason)}" if error.reason else ""
        return (
            f"the agent refused the request: {inert(error.message or '')} "
            f"(gRPC {inert(error.status_name)}{reason})"
        )
    if isinstance(error, HTTPStatusError) and error.status_name is not None:
        reason = f", {inert(error.reason)}" if error.reason else ""
        return (
            f"the agent refused the request: {inert(error.message or '')} "
            f"(HTTP {error.status} {inert(error.status_name)}{reason})"
        )
    if isinstance(error, (HTTPStatusError, InvalidResponse)):
        return f"unexpected answer from the agent: {inert(str(error))}"
    return inert(str(error))


def binding_list(value: str) -> list[str]:
    """
    C{--binding}'s value: one binding or several, comma-separated, in order
    of preference (C{http+json}, C{jsonrpc,websocket} ...; any case).

    @raise argparse.ArgumentTypeError: A name is no binding the client implements.
    """
    names: list[str] = []
    for part in value.split(","):
        name = part.strip().lower()
        if name not in BINDINGS:
            raise argparse.ArgumentTypeError(
                f"unknown binding {part.strip()!r} (choose from {', '.join(BINDINGS)}, "
                "or several, comma-separated)"
            )
        if name not in names:
            names.append(name)
    return names


def _too_large(error: ClientError) -> str | None:
    """
    For a request refused as too large (HTTP 413, the WebSocket binding's
    TOO_LARGE, or gRPC's RESOURCE_EXHAUSTED for a message over the
    server's limit), what to say.
    """
    if isinstance(error, RequestTooLarge):
        limit: Any = error.limit
    elif isinstance(error, (RPCError, GRPCStatusError)) and error.reason == "TOO_LARGE":
        limit = error.metadata.get("limit")
    else:
        return None
    if isinstance(limit, int) or (isinstance(limit, str) and limit.isdigit()):
        return f"the agent refused the message: too large: the limit is {int(limit)} bytes"
    return "the agent refused the message: too large"


class NotStructured(ClientError):
    """C{--data} is not what the agent takes as structured data; nothing was sent."""


def _origin(url: str) -> str | None:
    """
    The origin of an http(s) URL with a path (an endpoint's URL, given
    where the agent's base URL goes), where its card may be; else None.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    if parts.path in ("", "/") or parts.path.endswith(".json"):
        return None
    return f"{parts.scheme}://{parts.netloc}"


T = TypeVar("T")


async def _at_url_or_origin(
    args: argparse.Namespace, io: Output, discover: Callable[[str], Awaitable[T]]
) -> T:
    """
    C{discover(URL)}; when URL has a path and no card is found below it
    (HTTP 404 or 405: an endpoint's URL, such as C{.../a2a/v1}), the card at
    URL's origin, saying so on standard error.
    """
    try:
        return await discover(args.url)
    except HTTPStatusError as e:
        origin = _origin(args.url)
        if origin is None or e.status not in (404, 405):
            raise
        missed = f"no agent card at {inert(card_url(args.url))} (HTTP {e.status})"
        try:
            found = await discover(origin)
        except ClientError as again:
            raise ClientError(
                f"{missed}, nor at the URL's origin: {describe_peer(again)}"
            ) from None
        io.err.write(
            f"beacon: {missed}; using the card at the URL's origin,"
            f" {inert(card_url(origin))} (give the agent's base URL, {inert(origin)})\n"
        )
        return found


#: What Beacon's card says of its native protocol (the extension that
#: links its discovery document): a Beacon takes data parts valid against
#: its message schema, and stores anything else as text.
BEACON_PROTOCOL = "beacon/0.1"


def _is_beacon(card: AgentCard | None) -> bool:
    return card is not None and any(
        (extension.params or {}).get("protocol") == BEACON_PROTOCOL
        for extension in card.capabilities.extensions
    )


def _structured_problems(document: Any) -> list[str]:
    """
    Why Beacon's message schema refuses C{document}, naming each missing
    or extra property (the user's own file: it may be quoted); empty when
    it is valid.
    """
    from beacon.intake import schema_validator

    problems: list[str] = []
    errors = sorted(schema_validator().iter_errors(document), key=lambda e: list(e.absolute_path))
    for error in errors:
        where = "".join(
            f"[{step}]" if isinstance(step, int) else f".{step}" for step in error.absolute_path
        ).lstrip(".")
        prefix = f"{where}." if where else ""
        instance = error.instance
        if error.validator == "required" and isinstance(instance, dict):
            problems += [
                f"the property {prefix}{name} is missing"
                for name in error.validator_value
                if name not in instance
            ]
        elif error.validator == "additionalProperties" and isinstance(instance, dict):
            allowed = set(error.schema.get("properties", {}))
            problems += [
                f"the property {prefix}{name} is not allowed"
                for name in instance
                if name not in allowed
            ]
        else:
            message = error.message if len(error.message) <= 120 else error.message[:117] + "..."
            problems.append(f"{where or 'the document'}: {message}")
    return [inert(problem) for problem in problems]


def _peer_timeouts(args: argparse.Namespace) -> Timeouts:
    total = args.timeout
    return Timeouts(connect=min(args.connect_timeout, total), response=total, idle=total)


def _read_data(path: str) -> Any:
    """
    The JSON document in C{path} (for C{--data}).

    @raise ValueError: It cannot be read or is not JSON.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read(16 * 1024 * 1024 + 1)
    except OSError as e:
        raise ValueError(f"cannot read {path}: {(e.strerror or str(e)).lower()}") from None
    if len(raw) > 16 * 1024 * 1024:
        raise ValueError(f"{path} is larger than 16 MiB")
    try:
        return json.loads(raw)
    except ValueError:
        raise ValueError(f"{path} is not valid JSON") from None


async def _peer_card(reactor: IBeaconReactor, args: argparse.Namespace, io: Output) -> int:
    # --socket only says which socket a unix:///path URL's card is read on.
    socket = args.socket if args.url.startswith("unix://") else None
    card = await _at_url_or_origin(
        args, io,
        lambda url: fetch_card(
            reactor, url, timeouts=_peer_timeouts(args), socket_path=socket, verify=args.verify_keys
        ),
    )
    # The interface send and task would use; with --binding, none is an error.
    try:
        selected = select_interface(card, args.binding, socket_path=_socket_for(args))
    except NoCompatibleInterface:
        if args.binding is not None:
            raise
        selected = None
    if args.json:
        io.line(json_text(dict(card.raw)))
        return 0
    for line in card_lines(card):
        io.line(line)
    if args.verify_keys is not None:
        key = check_card_signature(card, args.verify_keys)
        io.line(f"signed by: kid {inert(key.kid)} ({key.alg}), a key of {inert(args.verify)}")
    if selected is None:
        io.line("selected interface: none this client can use")
    else:
        interface = selected.interface
        io.line(
            f"selected interface: {inert(interface.protocol_binding)} "
            f"{inert(interface.protocol_version)}  {inert(selected.address)}"
        )
    return 0


def _socket_for(args: argparse.Namespace) -> str | None:
    """The socket a unix interface is dialled at: --socket, or a unix:///path URL's."""
    if args.socket is not None:
        return str(args.socket)
    url = str(args.url)
    if url.startswith("unix://"):
        return urlsplit(url).path
    return None


async def _peer_client(reactor: IBeaconReactor, args: argparse.Namespace, io: Output) -> A2AClient:
    return await _at_url_or_origin(
        args, io,
        lambda url: A2AClient.discover(
            reactor,
            url,
            preference=args.binding,
            socket_path=args.socket,
            timeouts=_peer_timeouts(args),
            verify=args.verify_keys,
        ),
    )


async def _peer_send(reactor: IBeaconReactor, args: argparse.Namespace, io: Output) -> int:
    client = await _peer_client(reactor, args, io)
    if args.data_document is not None and _is_beacon(client.card):
        # A Beacon stores a data part that fails its schema as nothing (the
        # text alone, if any): refuse it here, saying why, rather than send
        # it to be silently dropped.
        problems = _structured_problems(args.data_document)
        if problems:
            await client.close()
            raise NotStructured(
                f"not sent: Beacon refuses --data {inert(args.data)} as structured data"
                f" (its message schema): {'; '.join(problems)}"
            )
    try:
        result = await client.send_message(text_message(args.text, args.data_document))
    finally:
        await client.close()
    if args.json:
        io.line(json_text(result))
        return 0
    outcome = outcome_of(result)
    if outcome.task is not None:
        io.line(f"task {inert(dig(outcome.task, 'id'))} {inert(dig(outcome.task, 'status', 'state'))}")
        if outcome.text:
            io.line(inert(outcome.text, newlines=True))
    else:
        io.line(inert(outcome.text or "", newlines=True))
    return 0


async def _peer_task(reactor: IBeaconReactor, args: argparse.Namespace, io: Output) -> int:
    client = await _peer_client(reactor, args, io)
    try:
        task = await client.get_task(args.id)
    finally:
        await client.close()
    if args.json:
        io.line(json_text(task))
    else:
        for line in task_lines(task):
            io.line(line)
    return 0


COMMANDS: dict[str, Callable[..., Any]] = {
    "card": _peer_card,
    "send": _peer_send,
    "task": _peer_task,
}


async def run_peer(reactor: IBeaconReactor, args: argparse.Namespace, out: IO[str], err: IO[str]) -> int:
    """
    Run one parsed C{beacon card|send|task} command, bounded as a whole by
    C{--timeout} on C{reactor}'s clock.

    @return: The exit code.
    """
    io = Output(out, err)
    if args.verify is not None:
        try:
            args.verify_keys = load_verification_keys(args.verify)
        except KeyFileError as e:
            # A bad argument, said before anything is fetched: as a usage error.
            err.write(f"beacon: --verify: {inert(str(e))}\n")
            return 2
    if args.binding == ["grpc"] and not grpc_installed():
        # Said before anything is fetched: nothing could use the answer.
        err.write(f"beacon: --binding grpc needs grpcio: {GRPC_EXTRA}\n")
        return 1
    seconds = args.timeout
    command = Deferred.fromCoroutine(COMMANDS[args.area](reactor, args, io))
    bounded = Deadline(
        reactor, seconds, lambda: Timeout(args.url, seconds, "command", "the agent")
    ).start(command)
    try:
        code: int = await bounded
        return code
    except BrokenPipeError:
        raise
    except Timeout as e:
        err.write(f"beacon: {describe_peer(e)}\n")
        return EXIT_TIMEOUT
    except UnverifiedCard as e:
        sent = "; nothing was sent" if args.area == "send" else ""
        err.write(f"beacon: {inert(str(e))}{sent}\n")
        return EXIT_UNVERIFIED
    except InvalidURL as e:
        # A URL given on the command line, refused before anything was dialled.
        err.write(f"beacon: {inert(str(e))}\n")
        return 2
    except ClientError as e:
        err.write(f"beacon: {describe_peer(e)}\n")
        return 1
    except Exception as e:
        err.write(f"beacon: internal error: {type(e).__name__}: {inert(str(e))}\n")
        return 1


def add_parsers(commands: Any) -> None:
    """Add C{card}, C{send} and C{task} to C{commands} (C{beacon}'s subparsers)."""

    def common(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "url", metavar="URL",
            help="the agent's base URL, its card's URL (http://, https://, ws:// or wss://), "
            "or unix:///path (its socket)",
        )
        parser.add_argument(
            "--timeout", metavar="S", type=duration, default=DEFAULT_PEER_TIMEOUT,
            help=f"bound the whole command to S seconds [default: {DEFAULT_PEER_TIMEOUT:g}]",
        )
        parser.add_argument(
            "--connect-timeout", metavar="S", type=duration, default=DEFAULT_CONNECT_TIMEOUT,
            help=f"bound each connection attempt [default: {DEFAULT_CONNECT_TIMEOUT:g}]",
        )
        parser.add_argument(
            "--socket", metavar="PATH", default=None,
            help="dial this unix socket for an interface of the unix socket binding "
            "(never a path the card names)",
        )
        parser.add_argument("--json", action="store_true", help="print ProtoJSON")
        parser.add_argument(
            "--verify", metavar="KEY_OR_JWKS", default=None,
            help="go on only if the card is signed by this key (a PEM public key file, "
            f"or a JWKS or JWK JSON file); else exit {EXIT_UNVERIFIED}",
        )
        parser.add_argument(
            "--binding", metavar="|".join(BINDINGS), type=binding_list, default=None,
            help="use only this binding, or these (comma-separated, in order of preference, "
            "over the card's order) [default: the card's first interface of "
            f"{', '.join(DEFAULT_PREFERENCE)} that can be used]",
        )

    card = commands.add_parser(
        "card", help="show an A2A agent's card",
        description="Fetch and show an A2A agent's card, and the interface send and task would use "
        "(with --binding, fail when none of those bindings can be used; with --verify, when the "
        "card is not signed by that key). beacon card keygen PATH makes a key to sign a "
        "Beacon's card with (beacon card keygen --help).",
    )
    common(card)
    send = commands.add_parser(
        "send", help="send a message to an A2A agent",
        description="Send a message to an A2A agent; print the task (id, state) or the reply's text.",
    )
    common(send)
    send.add_argument("text", metavar="TEXT")
    send.add_argument("--data", metavar="FILE.json", default=None, help="add this JSON document as a data part")
    task = commands.add_parser(
        "task", help="get a task from an A2A agent", description="Get a task from an A2A agent."
    )
    common(task)
    task.add_argument("id", metavar="ID")


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """
    Complete a peer command's C{args} (C{command}, the C{--data} document)
    and refuse what argparse cannot: a URL the client does not speak to
    (L{check_url}: with the one it most likely meant), C{--binding unix}
    (alone) with no socket, a C{--data} file that is not JSON.

    @raise SystemExit: A usage error (code 2).
    """
    args.command = args.area
    try:
        args.url = check_url(args.url)
    except InvalidURL as e:
        # Nothing is dialled: a misspelt https:// never goes out in clear text.
        parser.error(inert(str(e)))
    if getattr(args, "binding", None) == ["unix"] and args.socket is None and not args.url.startswith("unix://"):
        parser.error("--binding unix needs --socket PATH (or a unix:///path URL)")
    # --verify's keys are read when the command runs (run_peer).
    args.verify_keys = None
    args.data_document = None
    if getattr(args, "data", None) is not None:
        try:
            args.data_document = _read_data(args.data)
        except ValueError as e:
            parser.error(f"--data: {e}")
