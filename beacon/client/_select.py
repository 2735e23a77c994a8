"""
Interface selection (A2A 1.0 §8.3, digest §4.3): which entry of a card's
C{supportedInterfaces} this client talks to.

The bindings implemented here, by their short names:

  - C{jsonrpc}: C{JSONRPC} (HTTP or HTTPS);
  - C{http+json}: C{HTTP+JSON} (HTTP or HTTPS), the REST binding;
  - C{websocket}: C{https://a2a-rust.com/bindings/websocket/v1} (a2a-rust's WebSocket binding),
    also under its legacy token C{WEBSOCKET};
  - C{unix}: C{https://agentd.dev/a2a/binding/jsonrpc-unix} (agentd's),
    usable only when the caller configured a socket path: it is dialled
    there, never at the path or URL the card names;
  - C{grpc}: C{GRPC}, the gRPC binding (its url C{host:port}, or an
    http(s) URL), usable only when grpcio is installed (the C{grpc}
    extra).

An interface is usable when its binding is one of those and its
protocolVersion is 1.x. Any other binding (an unknown URI) is skipped,
never guessed at.

Which usable interface is chosen: by default the card's first (§8.3:
the card lists its interfaces in the agent's order of preference, and a
client takes the first entry it supports), whatever its binding. A caller
may give its own order instead (C{--binding}, C{preference=}): then the
first of its bindings that the card offers is chosen, within a binding
the card's first entry, and only the bindings it names are considered.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass

from beacon.client._card import AgentCard, AgentInterface
from beacon.client._errors import NoCompatibleInterface
from beacon.client._grpc import GRPC_EXTRA, target_of
from beacon.protocol import (
    GRPC_BINDING,
    HTTP_JSON_BINDING,
    JSONRPC_BINDING,
    UNIX_BINDING,
    WEBSOCKET_BINDING,
)

#: The JSON-RPC binding's name on a card.
JSONRPC = JSONRPC_BINDING
#: The HTTP+JSON (REST) binding's name on a card.
HTTP_JSON = HTTP_JSON_BINDING
#: The legacy token some cards use for the WebSocket binding.
LEGACY_WEBSOCKET = "WEBSOCKET"
#: The gRPC binding's name on a card.
GRPC = GRPC_BINDING

#: The bindings this client implements, by short name.
BINDINGS: dict[str, tuple[str, ...]] = {
    "jsonrpc": (JSONRPC,),
    "http+json": (HTTP_JSON,),
    "websocket": (WEBSOCKET_BINDING, LEGACY_WEBSOCKET),
    "unix": (UNIX_BINDING,),
    "grpc": (GRPC,),
}
#: The bindings considered when the caller names none: every one this
#: client implements, the card's order choosing among them.
DEFAULT_PREFERENCE: tuple[str, ...] = ("jsonrpc", "http+json", "websocket", "unix", "grpc")

_KIND_OF = {binding: kind for kind, bindings in BINDINGS.items() for binding in bindings}
#: The URL schemes each kind is dialled with (C{unix} dials the configured
#: path), and what an interface with another URL is said to lack.
_SCHEMES = {
    "jsonrpc": (("http://", "https://"), "not an http(s) URL"),
    "http+json": (("http://", "https://"), "not an http(s) URL"),
    "websocket": (("ws://", "wss://"), "not a ws(s) URL"),
}


@dataclass(frozen=True)
class Selected:
    """
    The interface chosen, how to talk to it (C{kind}: C{jsonrpc},
    C{http+json}, C{websocket}, C{unix} or C{grpc}) and what is dialled:
    the interface's URL, or for C{unix} the socket path the caller
    configured.
    """

    interface: AgentInterface
    kind: str
    address: str

    @property
    def tenant(self) -> str | None:
        """The tenant every request carries (§8.3), if the entry has one."""
        return self.interface.tenant


def binding_kind(binding: str) -> str | None:
    """The short name of a binding this client implements, else None."""
    return _KIND_OF.get(binding)


def preference_name(name: str) -> str:
    """
    The short name C{name} stands for: a short name in any case
    (C{"HTTP+JSON"}, C{"jsonrpc"}) or a binding's name on a card (its URI,
    C{"WEBSOCKET"}).

    @raise ValueError: It names no binding this client implements.
    """
    lowered = name.strip().lower()
    if lowered in BINDINGS:
        return lowered
    kind = _KIND_OF.get(name.strip())
    if kind is None:
        kind = next((k for b, k in _KIND_OF.items() if b.lower() == lowered), None)
    if kind is None:
        raise ValueError(f"unknown binding {name!r} (one of {', '.join(BINDINGS)})")
    return kind


def grpc_installed() -> bool:
    """Whether grpcio can be imported (without importing it)."""
    try:
        return importlib.util.find_spec("grpc") is not None
    except (ImportError, ValueError):
        return False


def version_usable(version: str) -> bool:
    """Whether C{version} is a 1.x protocolVersion."""
    major, _, minor = version.partition(".")
    return major == "1" and (not minor or minor.split(".")[0].isdigit())


def select_interface(
    card: AgentCard,
    preference: Sequence[str] | None = None,
    *,
    socket_path: str | None = None,
) -> Selected:
    """
    Choose the interface to talk to.

    @param preference: Bindings (short names such as C{"jsonrpc"},
        C{"http+json"}, C{"websocket"}, C{"unix"}, in any case, or their
        names on a card) in the caller's order of preference; only these
        are considered, and this order wins over the card's. None: the
        card's first usable interface, of any binding.
    @param socket_path: The unix socket to dial for a C{unix} interface;
        without it a C{unix} interface is skipped.
    @raise NoCompatibleInterface: Nothing usable (it says why each entry
        was skipped).
    @raise ValueError: A name in C{preference} that is no binding this
        client implements.
    """
    order = (
        None if preference is None else list(dict.fromkeys(preference_name(n) for n in preference))
    )
    skipped: list[str] = []
    usable: list[Selected] = []
    for interface in card.supported_interfaces:
        label = f"{interface.protocol_binding} {interface.protocol_version or '(no version)'}"
        kind = binding_kind(interface.protocol_binding)
        if kind is None:
            skipped.append(f"{label}: binding not implemented by this client")
            continue
        if not version_usable(interface.protocol_version):
            skipped.append(f"{label}: protocolVersion is not 1.x")
            continue
        if order is not None and kind not in order:
            skipped.append(f"{label}: not among the bindings asked for")
            continue
        if kind == "grpc":
            if target_of(interface.url) is None:
                skipped.append(f"{label}: not a host:port or http(s) URL")
                continue
            if not grpc_installed():
                skipped.append(f"{label}: needs grpcio ({GRPC_EXTRA})")
                continue
            usable.append(Selected(interface, kind, interface.url))
            continue
        if kind == "unix":
            if socket_path is None:
                skipped.append(f"{label}: no socket path configured to dial")
                continue
            usable.append(Selected(interface, kind, socket_path))
            continue
        schemes, lacking = _SCHEMES[kind]
        if not interface.url.lower().startswith(schemes):
            skipped.append(f"{label}: {lacking}")
            continue
        usable.append(Selected(interface, kind, interface.url))
    if not usable:
        raise NoCompatibleInterface(skipped)
    if order is None:
        return usable[0]
    # min() keeps the first of equals: the card's order within a binding.
    return min(usable, key=lambda s: order.index(s.kind))
