"""
Interface selection (A2A 1.0 §8.3, digest §4.3): which entry of a card's
C{supportedInterfaces} this client talks to.

The bindings implemented here, by their short names:

  - C{jsonrpc}: C{JSONRPC} (HTTP or HTTPS);
  - C{websocket}: C{https://a2a-rust.com/bindings/websocket/v1} (a2a-rust's WebSocket binding),
    also under its legacy token C{WEBSOCKET};
  - C{unix}: C{https://agentd.dev/a2a/binding/jsonrpc-unix} (agentd's),
    usable only when the caller configured a socket path: it is dialled
    there, never at the path or URL the card names.

An interface is usable when its binding is one of those and its
protocolVersion is 1.x. Any other binding (C{GRPC}, C{HTTP+JSON}, an unknown
URI) is skipped, never guessed at. Without a caller preference the first
usable entry in the card's order wins (§8.3: the card lists them in the
agent's order of preference); with one, the caller's order of bindings
wins, and within a binding the card's order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from beacon.client._card import AgentCard, AgentInterface
from beacon.client._errors import NoCompatibleInterface
from beacon.protocol import JSONRPC_BINDING, UNIX_BINDING, WEBSOCKET_BINDING

#: The JSON-RPC binding's name on a card.
JSONRPC = JSONRPC_BINDING
#: The legacy token some cards use for the WebSocket binding.
LEGACY_WEBSOCKET = "WEBSOCKET"

#: The bindings this client implements, by short name.
BINDINGS: dict[str, tuple[str, ...]] = {
    "jsonrpc": (JSONRPC,),
    "websocket": (WEBSOCKET_BINDING, LEGACY_WEBSOCKET),
    "unix": (UNIX_BINDING,),
}
_KIND_OF = {binding: kind for kind, bindings in BINDINGS.items() for binding in bindings}


@dataclass(frozen=True)
class Selected:
    """
    The interface chosen, how to talk to it (C{kind}: C{jsonrpc},
    C{websocket} or C{unix}) and what is dialled: the interface's URL, or for
    C{unix} the socket path the caller configured.
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

    @param preference: Short binding names (C{"jsonrpc"}, C{"websocket"},
        C{"unix"}) in the caller's order; only these are considered. None:
        every implemented binding, in the card's order.
    @param socket_path: The unix socket to dial for a C{unix} interface;
        without it a C{unix} interface is skipped.
    @raise NoCompatibleInterface: Nothing usable (it says why each entry
        was skipped).
    @raise ValueError: An unknown short name in C{preference}.
    """
    if preference is not None:
        for name in preference:
            if name not in BINDINGS:
                raise ValueError(f"unknown binding {name!r} (one of {', '.join(BINDINGS)})")
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
        if preference is not None and kind not in preference:
            skipped.append(f"{label}: not among the bindings asked for")
            continue
        if kind == "unix":
            if socket_path is None:
                skipped.append(f"{label}: no socket path configured to dial")
                continue
            usable.append(Selected(interface, kind, socket_path))
            continue
        if kind == "jsonrpc" and not interface.url.lower().startswith(("http://", "https://")):
            skipped.append(f"{label}: not an http(s) URL")
            continue
        if kind == "websocket" and not interface.url.lower().startswith(("ws://", "wss://")):
            skipped.append(f"{label}: not a ws(s) URL")
            continue
        usable.append(Selected(interface, kind, interface.url))
    if not usable:
        raise NoCompatibleInterface(skipped)
    if preference is None:
        return usable[0]
    return min(usable, key=lambda s: list(preference).index(s.kind))
