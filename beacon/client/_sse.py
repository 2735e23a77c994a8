"""
An incremental Server-Sent Events reader: bytes in, one C{data} payload per
event out, with a cap on the size of any one event. No I/O.

Only what an A2A stream uses is kept: C{data:} lines (joined with newlines,
as the SSE specification says); comment lines (starting with C{:}, the
server's keepalives) and the C{event}, C{id} and C{retry} fields are
skipped. Lines end with CR LF, LF or CR.
"""

from __future__ import annotations

from typing import Callable

from beacon.client._errors import InvalidResponse

#: The largest event accepted by default: 1 MiB.
DEFAULT_MAX_EVENT = 1024 * 1024


class EventTooLarge(InvalidResponse):
    """One event is larger than the cap; the stream cannot be trusted."""


class SSEReader:
    """
    Feed it the body of a C{text/event-stream} response, chunk by chunk; it
    calls C{on_data} with the C{data} of each complete event.
    """

    def __init__(
        self, on_data: Callable[[bytes], None], max_event: int = DEFAULT_MAX_EVENT
    ) -> None:
        """
        @param on_data: Called with each event's data (bytes, UTF-8 JSON
            for A2A).
        @param max_event: The most bytes one event may take on the wire,
            its field names and line ends included.
        """
        self._on_data = on_data
        self._max_event = max_event
        self._buffer = bytearray()
        self._scanned = 0
        self._event_size = 0
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> None:
        """
        Take the next chunk of the body.

        @raise EventTooLarge: The current event grew past the cap.
        """
        self._buffer += chunk
        while True:
            end, after = self._line_end()
            if end < 0:
                break
            line = bytes(self._buffer[:end])
            del self._buffer[:after]
            self._scanned = 0
            self._event_size += after
            self._check_size(0)
            self._line(line)
        self._check_size(len(self._buffer))

    def _check_size(self, pending: int) -> None:
        if self._event_size + pending > self._max_event:
            raise EventTooLarge(f"an event is larger than {self._max_event} bytes")

    def _line_end(self) -> tuple[int, int]:
        """
        Where the first complete line ends and where the next begins, or
        C{(-1, -1)}; remembers how far the buffer holds no line end.
        """
        buffer = self._buffer
        lf = buffer.find(b"\n", self._scanned)
        cr = buffer.find(b"\r", self._scanned, lf if lf >= 0 else len(buffer))
        if cr < 0:
            if lf < 0:
                self._scanned = len(buffer)
                return -1, -1
            return lf, lf + 1
        if cr + 1 == len(buffer):
            # A CR at the end may be the first half of CR LF: wait for more.
            self._scanned = cr
            return -1, -1
        return cr, cr + (2 if buffer[cr + 1] == 0x0A else 1)

    def _line(self, line: bytes) -> None:
        if not line:
            self._dispatch()
            return
        if line.startswith(b":"):
            return
        name, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._data.append(value)

    def _dispatch(self) -> None:
        data, self._data = self._data, []
        self._event_size = 0
        if data:
            self._on_data(b"\n".join(data))
