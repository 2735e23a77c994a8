"""
How an open WebSocket connection's messages meet the wire beside
autobahn's callbacks (L{IFrameIO}): every frame through autobahn's public
API (L{AutobahnFrames}), or the plain frames that carry nearly all of the
binding's traffic read and written by Beacon itself, as RFC 6455 5.2 lays
them out (L{PlainFrames}, the shortcut, on unless the factory is made with
C{direct=False}).
"""

from __future__ import annotations

from typing import NamedTuple

from autobahn.twisted.websocket import WebSocketServerProtocol
from zope.interface import Interface, implementer


class Message(NamedTuple):
    """
    A whole incoming message: its payload when within max_body, else the
    first bytes of it (L{ID_PREFIX}); C{wire}: its frames' size on the wire.
    """

    binary: bool
    payload: bytes | None
    prefix: bytes | None
    wire: int


class IFrameIO(Interface):
    """
    How an open connection's messages meet the wire beside autobahn's
    callbacks. L{AutobahnFrames} leaves every frame to autobahn's public
    API; L{PlainFrames} reads and writes the plain frames that carry
    nearly all of the binding's traffic itself, and leaves the rest to
    autobahn (C{WebSocketFactory(direct=False)} turns it off).
    """

    def read_frame(data: bytes, at: int, cap: int) -> tuple[Message, int] | None:
        """
        The message that is one whole plain frame at C{data[at:]}, with the
        offset after that frame; None when there is none, and autobahn
        reads what is there.

        @param cap: The largest payload read here (max_body and
            max_message): a larger one is autobahn's to read.
        """

    def write_text(connection: WebSocketServerProtocol, payload: bytes) -> None:
        """Send C{payload} as one text message on C{connection}."""


@implementer(IFrameIO)
class AutobahnFrames:
    """Every frame read and written by autobahn, through its public API."""

    def read_frame(self, data: bytes, at: int, cap: int) -> tuple[Message, int] | None:
        """None: autobahn reads every frame."""
        return None

    def write_text(self, connection: WebSocketServerProtocol, payload: bytes) -> None:
        """Autobahn's L{sendMessage}."""
        connection.sendMessage(payload, isBinary=False)


@implementer(IFrameIO)
class PlainFrames:
    """
    Plain frames read and written by Beacon, as RFC 6455 5.2 lays them
    out, where autobahn would spend more building its debug log's
    arguments than the frame costs. A plain incoming frame is final,
    masked, text or binary, with no RSV bit and a minimally encoded length
    within the cap; a plain outgoing frame is a final, unmasked text frame
    within C{max_message} (the factory's protocol options never fragment,
    mask or compress what the server sends). Autobahn reads and writes
    every other frame, and what autobahn does after them is unchanged:
    it never holds a byte when a plain frame is read (the connection
    reads here only at a frame boundary outside a fragmented message),
    and writes its own frames (pongs, closes) straight to the transport,
    in order with these.
    """

    def __init__(self, max_message: int) -> None:
        """
        @param max_message: A larger answer goes to autobahn, which refuses
            it (L{PayloadExceededError}) as it always has.
        """
        self.max_message = max_message

    def read_frame(self, data: bytes, at: int, cap: int) -> tuple[Message, int] | None:
        """The whole plain frame at C{data[at:]}, unmasked, if there is one."""
        size = len(data)
        if size - at < 6:
            return None
        first = data[at]
        second = data[at + 1]
        opcode = first & 0x7F  # with the RSV bits, which must be clear
        if (opcode != 1 and opcode != 2) or not first & 0x80 or not second & 0x80:
            return None
        length = second & 0x7F
        if length < 126:
            start = at + 6
        elif length == 126:
            start = at + 8
            if start > size:
                return None
            length = (data[at + 2] << 8) | data[at + 3]
            if length < 126:
                return None
        else:
            start = at + 14
            if start > size:
                return None
            length = int.from_bytes(data[at + 2 : at + 10], "big")
            if length < 0x10000 or length >> 63:
                return None
        end = start + length
        if end > size or length > cap:
            return None
        payload = unmask(data[start:end], data[start - 4 : start])
        return Message(opcode == 2, payload, None, end - at), end

    def write_text(self, connection: WebSocketServerProtocol, payload: bytes) -> None:
        """One final text frame, written to the transport."""
        if len(payload) > self.max_message:
            connection.sendMessage(payload, isBinary=False)
            return
        transport = connection.transport
        assert transport is not None
        transport.write(text_frame(payload))


def unmask(masked: bytes, key: bytes) -> bytes:
    """C{masked} XORed with the 4-byte C{key} repeated (RFC 6455 5.3)."""
    count = len(masked)
    if not count:
        return b""
    repeated = (key * ((count >> 2) + 1))[:count]
    return (int.from_bytes(masked, "little") ^ int.from_bytes(repeated, "little")).to_bytes(
        count, "little"
    )


def text_frame(payload: bytes) -> bytes:
    """A server's text frame (RFC 6455 5.2): final, unmasked, C{payload} whole."""
    size = len(payload)
    if size < 126:
        return bytes((0x81, size)) + payload
    if size < 0x10000:
        return bytes((0x81, 126)) + size.to_bytes(2, "big") + payload
    return bytes((0x81, 127)) + size.to_bytes(8, "big") + payload


def frame_size(head: bytes) -> int | None:
    """
    The size on the wire of the frame whose first bytes are C{head} (RFC
    6455 5.2: head, masking key, payload), or None while its head is not
    all there.
    """
    if len(head) < 2:
        return None
    second = head[1]
    length = second & 0x7F
    key = 4 if second & 0x80 else 0
    if length == 126:
        return None if len(head) < 4 else 4 + key + int.from_bytes(head[2:4], "big")
    if length == 127:
        return None if len(head) < 10 else 10 + key + int.from_bytes(head[2:10], "big")
    return 2 + key + length


def frame_head_size(length: int) -> int:
    """The size of a masked client frame's head for a payload of C{length} (RFC 6455 5.2)."""
    if length < 126:
        return 6
    return 8 if length < 0x10000 else 14


__all__ = [
    "AutobahnFrames",
    "IFrameIO",
    "Message",
    "PlainFrames",
    "frame_head_size",
    "frame_size",
    "text_frame",
    "unmask",
]
