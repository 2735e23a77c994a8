"""
L{CappedRequest}: twisted.web's request, holding at most a cap of body in
memory, and naming its server L{SERVER}. Beacon's HTTP doors
(L{beacon.bindings}) and the web console (L{beacon.console}) answer through
it.
"""

from __future__ import annotations

from io import BytesIO

from twisted.web import server

#: The C{Server} header of every HTTP answer Beacon makes: its name, without
#: a version (twisted.web would name itself and its version, which tells a
#: prober which flaws to try).
SERVER = b"Beacon"


class CappedRequest(server.Request):
    """
    A request that never buffers more than L{body_limit} bytes of body. Over
    the cap it calls L{refuse_too_large} once (which answers and closes)
    and drops the rest: when the declared Content-Length is over, before
    reading the body; when a chunked or streamed body grows over, as soon
    as it does. A refused request is never processed.
    """

    _received = 0
    _refused = False

    def body_limit(self) -> int:
        """The most bytes of body this request holds."""
        raise NotImplementedError

    def refuse_too_large(self) -> None:
        """Answer that the body is over L{body_limit}, then close."""
        raise NotImplementedError

    def body_expected(self) -> None:
        """The headers are whole and a body within the cap may follow."""

    @property
    def refused(self) -> bool:
        """Whether the request was refused while it arrived."""
        return self._refused

    def stop_reading(self) -> None:
        """Refuse the rest: nothing more is buffered or processed."""
        self._refused = True
        # No "100 Continue" may follow the refusal.
        self.requestHeaders.removeHeader(b"Expect")

    def gotLength(self, length: int | None) -> None:
        """Refuse a declared length over the cap; buffer in memory otherwise."""
        self.content = BytesIO()
        if length is not None and length > self.body_limit():
            self.stop_reading()
            self.refuse_too_large()
        else:
            self.body_expected()

    def handleContentChunk(self, data: bytes) -> None:
        """Buffer a chunk of body, unless the body has gone over the cap."""
        if self._refused:
            return
        self._received += len(data)
        if self._received > self.body_limit():
            self.content = BytesIO()
            self.stop_reading()
            self.refuse_too_large()
            return
        assert self.content is not None
        self.content.write(data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        """Process the request, unless it was refused while arriving."""
        if self._refused:
            return
        super().requestReceived(command, path, version)

    def write(self, data: bytes) -> None:
        """Write part of the body; the first write sends the head, with C{Server: }L{SERVER}."""
        if not self.startedWriting:
            self.responseHeaders.setRawHeaders(b"Server", [SERVER])
        super().write(data)


__all__ = ["SERVER", "CappedRequest"]
