"""
HPACK (RFC 7541), HTTP/2's header compression: a strict, fast L{Decoder} of
header blocks, and the two encodings Beacon's answers use (L{literal},
L{indexed}), which never touch the peer's dynamic table.

The decoder takes every representation of RFC 7541 and refuses, with
L{HPACKError} (the connection's COMPRESSION_ERROR), whatever breaks it: an
index of 0 or past the tables, a table size update after the first field or
over the size the decoder allows, an integer over 2**32 - 1 or longer than 5
continuation bytes, a string past the block's end, a Huffman string holding
EOS or ending in padding longer than 7 bits or not all ones. Its work is
linear in the block's size.

Speed: a Huffman string is decoded a byte at a time through a table built
at import (one state per inner node of the code's tree); and a block that
changes nothing in the dynamic table (grpc-core's blocks after a
connection's first call: indexed fields and literals without indexing) is
remembered, with its fields, until the table next changes, so that the next
identical block costs a dictionary look-up.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["Decoder", "HPACKError", "HeaderListTooLarge", "STATIC_TABLE", "indexed", "integer", "literal"]

#: The largest integer a block may hold (RFC 7541 §5.1 leaves the bound to
#: the decoder); and the most continuation bytes it may take.
MAX_INTEGER = 2**32 - 1
MAX_CONTINUATION = 5

#: Blocks remembered per decoder, and the longest one remembered.
MEMO_BLOCKS = 64
MEMO_BLOCK_SIZE = 1024

#: RFC 7541 Appendix A: index 1 is C{STATIC_TABLE[0]}.
STATIC_TABLE: tuple[tuple[bytes, bytes], ...] = (
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
)

#: RFC 7541 Appendix B: symbol i's (code, length in bits); symbol 256 is EOS.
HUFFMAN_CODE: tuple[tuple[int, int], ...] = (
    (0x1ff8, 13), (0x7fffd8, 23), (0xfffffe2, 28), (0xfffffe3, 28), (0xfffffe4, 28),
    (0xfffffe5, 28), (0xfffffe6, 28), (0xfffffe7, 28), (0xfffffe8, 28), (0xffffea, 24),
    (0x3ffffffc, 30), (0xfffffe9, 28), (0xfffffea, 28), (0x3ffffffd, 30), (0xfffffeb, 28),
    (0xfffffec, 28), (0xfffffed, 28), (0xfffffee, 28), (0xfffffef, 28), (0xffffff0, 28),
    (0xffffff1, 28), (0xffffff2, 28), (0x3ffffffe, 30), (0xffffff3, 28), (0xffffff4, 28),
    (0xffffff5, 28), (0xffffff6, 28), (0xffffff7, 28), (0xffffff8, 28), (0xffffff9, 28),
    (0xffffffa, 28), (0xffffffb, 28), (0x14, 6), (0x3f8, 10), (0x3f9, 10), (0xffa, 12),
    (0x1ff9, 13), (0x15, 6), (0xf8, 8), (0x7fa, 11), (0x3fa, 10), (0x3fb, 10), (0xf9, 8),
    (0x7fb, 11), (0xfa, 8), (0x16, 6), (0x17, 6), (0x18, 6), (0x0, 5), (0x1, 5), (0x2, 5),
    (0x19, 6), (0x1a, 6), (0x1b, 6), (0x1c, 6), (0x1d, 6), (0x1e, 6), (0x1f, 6), (0x5c, 7),
    (0xfb, 8), (0x7ffc, 15), (0x20, 6), (0xffb, 12), (0x3fc, 10), (0x1ffa, 13), (0x21, 6),
    (0x5d, 7), (0x5e, 7), (0x5f, 7), (0x60, 7), (0x61, 7), (0x62, 7), (0x63, 7), (0x64, 7),
    (0x65, 7), (0x66, 7), (0x67, 7), (0x68, 7), (0x69, 7), (0x6a, 7), (0x6b, 7), (0x6c, 7),
    (0x6d, 7), (0x6e, 7), (0x6f, 7), (0x70, 7), (0x71, 7), (0x72, 7), (0xfc, 8), (0x73, 7),
    (0xfd, 8), (0x1ffb, 13), (0x7fff0, 19), (0x1ffc, 13), (0x3ffc, 14), (0x22, 6), (0x7ffd, 15),
    (0x3, 5), (0x23, 6), (0x4, 5), (0x24, 6), (0x5, 5), (0x25, 6), (0x26, 6), (0x27, 6), (0x6, 5),
    (0x74, 7), (0x75, 7), (0x28, 6), (0x29, 6), (0x2a, 6), (0x7, 5), (0x2b, 6), (0x76, 7),
    (0x2c, 6), (0x8, 5), (0x9, 5), (0x2d, 6), (0x77, 7), (0x78, 7), (0x79, 7), (0x7a, 7),
    (0x7b, 7), (0x7ffe, 15), (0x7fc, 11), (0x3ffd, 14), (0x1ffd, 13), (0xffffffc, 28),
    (0xfffe6, 20), (0x3fffd2, 22), (0xfffe7, 20), (0xfffe8, 20), (0x3fffd3, 22), (0x3fffd4, 22),
    (0x3fffd5, 22), (0x7fffd9, 23), (0x3fffd6, 22), (0x7fffda, 23), (0x7fffdb, 23), (0x7fffdc, 23),
    (0x7fffdd, 23), (0x7fffde, 23), (0xffffeb, 24), (0x7fffdf, 23), (0xffffec, 24), (0xffffed, 24),
    (0x3fffd7, 22), (0x7fffe0, 23), (0xffffee, 24), (0x7fffe1, 23), (0x7fffe2, 23), (0x7fffe3, 23),
    (0x7fffe4, 23), (0x1fffdc, 21), (0x3fffd8, 22), (0x7fffe5, 23), (0x3fffd9, 22), (0x7fffe6, 23),
    (0x7fffe7, 23), (0xffffef, 24), (0x3fffda, 22), (0x1fffdd, 21), (0xfffe9, 20), (0x3fffdb, 22),
    (0x3fffdc, 22), (0x7fffe8, 23), (0x7fffe9, 23), (0x1fffde, 21), (0x7fffea, 23), (0x3fffdd, 22),
    (0x3fffde, 22), (0xfffff0, 24), (0x1fffdf, 21), (0x3fffdf, 22), (0x7fffeb, 23), (0x7fffec, 23),
    (0x1fffe0, 21), (0x1fffe1, 21), (0x3fffe0, 22), (0x1fffe2, 21), (0x7fffed, 23), (0x3fffe1, 22),
    (0x7fffee, 23), (0x7fffef, 23), (0xfffea, 20), (0x3fffe2, 22), (0x3fffe3, 22), (0x3fffe4, 22),
    (0x7ffff0, 23), (0x3fffe5, 22), (0x3fffe6, 22), (0x7ffff1, 23), (0x3ffffe0, 26),
    (0x3ffffe1, 26), (0xfffeb, 20), (0x7fff1, 19), (0x3fffe7, 22), (0x7ffff2, 23), (0x3fffe8, 22),
    (0x1ffffec, 25), (0x3ffffe2, 26), (0x3ffffe3, 26), (0x3ffffe4, 26), (0x7ffffde, 27),
    (0x7ffffdf, 27), (0x3ffffe5, 26), (0xfffff1, 24), (0x1ffffed, 25), (0x7fff2, 19),
    (0x1fffe3, 21), (0x3ffffe6, 26), (0x7ffffe0, 27), (0x7ffffe1, 27), (0x3ffffe7, 26),
    (0x7ffffe2, 27), (0xfffff2, 24), (0x1fffe4, 21), (0x1fffe5, 21), (0x3ffffe8, 26),
    (0x3ffffe9, 26), (0xffffffd, 28), (0x7ffffe3, 27), (0x7ffffe4, 27), (0x7ffffe5, 27),
    (0xfffec, 20), (0xfffff3, 24), (0xfffed, 20), (0x1fffe6, 21), (0x3fffe9, 22), (0x1fffe7, 21),
    (0x1fffe8, 21), (0x7ffff3, 23), (0x3fffea, 22), (0x3fffeb, 22), (0x1ffffee, 25),
    (0x1ffffef, 25), (0xfffff4, 24), (0xfffff5, 24), (0x3ffffea, 26), (0x7ffff4, 23),
    (0x3ffffeb, 26), (0x7ffffe6, 27), (0x3ffffec, 26), (0x3ffffed, 26), (0x7ffffe7, 27),
    (0x7ffffe8, 27), (0x7ffffe9, 27), (0x7ffffea, 27), (0x7ffffeb, 27), (0xffffffe, 28),
    (0x7ffffec, 27), (0x7ffffed, 27), (0x7ffffee, 27), (0x7ffffef, 27), (0x7fffff0, 27),
    (0x3ffffee, 26), (0x3fffffff, 30),
)

_FIRST_DYNAMIC = len(STATIC_TABLE) + 1
_STATIC_SIZES = tuple(len(name) + len(value) + 32 for name, value in STATIC_TABLE)


class HPACKError(Exception):
    """A header block that breaks RFC 7541: the connection's COMPRESSION_ERROR."""


class HeaderListTooLarge(Exception):
    """
    The decoded list is over the limit; the block WAS decoded whole, so the
    dynamic table is consistent and the connection may go on (the stream is
    refused).
    """


def _huffman_machine() -> tuple[list[tuple[int, bytes]], frozenset[int]]:
    """
    The Huffman decoder's table, from L{HUFFMAN_CODE}: its states are the
    inner nodes of the code's tree (0, the root, between symbols) and a
    sink (after EOS), each times 256; entry C{state + byte} is the state
    after that byte and the symbols it completes.

    @return: The table, and the states a string may end in (the root, or
        up to 7 one bits into a code: the padding RFC 7541 §5.2 allows).
    """
    # children[node][bit]: an inner node (> 0), or ~symbol for a leaf.
    children: list[list[int]] = [[0, 0]]
    for symbol, (code, length) in enumerate(HUFFMAN_CODE):
        node = 0
        for shift in range(length - 1, 0, -1):
            bit = (code >> shift) & 1
            if not children[node][bit]:
                children.append([0, 0])
                children[node][bit] = len(children) - 1
            node = children[node][bit]
        children[node][code & 1] = ~symbol
    sink = len(children)
    assert sink == 256, "the code is a complete tree of 257 leaves"
    nibbles: list[tuple[int, bytes]] = []
    for state in range(sink + 1):
        for value in range(16):
            node, out = state, b""
            for shift in (3, 2, 1, 0):
                if node == sink:
                    break
                child = children[node][(value >> shift) & 1]
                if child > 0:
                    node = child
                elif child == ~256:
                    node = sink
                else:
                    node, out = 0, out + bytes((~child,))
            nibbles.append((node, out))
    rows = [[(end << 8, out) for end, out in nibbles[state * 16 : state * 16 + 16]] for state in range(sink + 1)]
    table: list[tuple[int, bytes]] = []
    for state in range(sink + 1):
        for middle, first in nibbles[state * 16 : state * 16 + 16]:
            if first:
                table.extend([(end, first + second) for end, second in rows[middle]])
            else:
                table.extend(rows[middle])
    accept, node = {0}, 0
    for _ in range(7):
        node = children[node][1]
        accept.add(node << 8)
    return table, frozenset(accept)


_HUFFMAN, _HUFFMAN_ENDS = _huffman_machine()


def _huffman(data: bytes) -> bytes:
    """
    Decode a Huffman-coded string (RFC 7541 §5.2).

    @raise HPACKError: C{data} holds EOS, or ends other than in at most 7
        bits of padding, all ones.
    """
    table = _HUFFMAN
    state = 0
    parts: list[bytes] = []
    append = parts.append
    for byte in data:
        state, out = table[state + byte]
        append(out)
    if state not in _HUFFMAN_ENDS:
        raise HPACKError("Huffman string holds EOS or ends in bad padding")
    return b"".join(parts)


def _integer(block: bytes, pos: int, mask: int) -> tuple[int, int]:
    """
    Decode the integer (RFC 7541 §5.1) whose prefix is C{block[pos] & mask}.

    @return: The integer, and the position after it.
    @raise HPACKError: The block ends inside it, or it is over
        L{MAX_INTEGER} or takes more than L{MAX_CONTINUATION} continuation
        bytes.
    """
    value = block[pos] & mask
    pos += 1
    if value < mask:
        return value, pos
    shift = 0
    last = min(pos + MAX_CONTINUATION, len(block))
    while pos < last:
        byte = block[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        if byte < 0x80:
            if value > MAX_INTEGER:
                raise HPACKError("integer over 2**32 - 1")
            return value, pos
        shift += 7
    if pos == len(block):
        raise HPACKError("header block truncated inside an integer")
    raise HPACKError(f"integer longer than {MAX_CONTINUATION} continuation bytes")


def _string(block: bytes, pos: int) -> tuple[bytes, int]:
    """
    Decode the string literal (RFC 7541 §5.2) at C{block[pos]}.

    @return: The string, and the position after it.
    @raise HPACKError: The block ends inside it, or a Huffman string is bad.
    """
    if pos >= len(block):
        raise HPACKError("header block truncated before a string")
    first = block[pos]
    if first & 0x7F == 0x7F:
        length, pos = _integer(block, pos, 0x7F)
    else:
        length = first & 0x7F
        pos += 1
    end = pos + length
    if end > len(block):
        raise HPACKError("header block truncated inside a string")
    if first & 0x80:
        return _huffman(block[pos:end]), end
    return block[pos:end], end


class Decoder:
    """
    One connection's HPACK decoder: its dynamic table follows the peer's
    encoder block after block, so every header block the connection
    receives goes through L{decode}, in order.

    @ivar max_table_size: The largest dynamic table size the peer may set
        (our SETTINGS_HEADER_TABLE_SIZE); the table starts at this size.
    @ivar max_header_list_size: The largest header list L{decode} returns,
        in RFC 7540 §6.5.2's measure.
    """

    def __init__(self, *, max_table_size: int = 4096, max_header_list_size: int = 16384) -> None:
        self.max_table_size = max_table_size
        self.max_header_list_size = max_header_list_size
        # Index i of the header block is _table[i]: a placeholder at 0,
        # the static table, then the dynamic table, newest first; _sizes
        # holds each entry's size (RFC 7541 §4.1).
        self._table: list[tuple[bytes, bytes]] = [(b"", b""), *STATIC_TABLE]
        self._sizes: list[int] = [0, *_STATIC_SIZES]
        self._size = max_table_size
        self._used = 0
        # Bumped by every change to the dynamic table; _memo maps blocks
        # decoded since the last change, which changed nothing, to their
        # fields and the list's size.
        self._generation = 0
        self._memo: dict[bytes, tuple[tuple[tuple[bytes, bytes], ...], int]] = {}

    @property
    def table_size(self) -> int:
        """The dynamic table's size (RFC 7541 §4.2), as last set."""
        return self._size

    @property
    def dynamic_table(self) -> list[tuple[bytes, bytes]]:
        """The dynamic table's entries, newest (index 62) first."""
        return self._table[_FIRST_DYNAMIC:]

    def decode(self, block: bytes) -> Sequence[tuple[bytes, bytes]]:
        """
        Decode one complete header block (HEADERS + CONTINUATION payloads
        joined).

        @return: The header list: (name, value) pairs, in order, as sent
            (names are not checked here; a never-indexed field is not told
            from one without indexing). A block decoded from the memo gives
            the very tuple it gave before (so a caller may remember what it
            read of it by its identity); any other, a new list.
        @raise HPACKError: The block breaks RFC 7541; the decoder is of no
            further use.
        @raise HeaderListTooLarge: The list is over C{max_header_list_size};
            the block was decoded whole and the decoder is ready for the
            next.
        """
        remembered = self._memo.get(block)
        if remembered is not None and remembered[1] <= self.max_header_list_size:
            return remembered[0]
        generation = self._generation
        fields: list[tuple[bytes, bytes]] = []
        append = fields.append
        table = self._table
        sizes = self._sizes
        limit = self.max_header_list_size
        total = 0
        pos = 0
        end = len(block)
        while pos < end and block[pos] & 0xE0 == 0x20:
            size, pos = _integer(block, pos, 0x1F)
            self._resize(size)
        while pos < end:
            byte = block[pos]
            if byte & 0x80:
                # Indexed field (§6.1).
                if byte == 0xFF:
                    index, pos = _integer(block, pos, 0x7F)
                else:
                    index = byte & 0x7F
                    pos += 1
                if not 0 < index < len(table):
                    raise HPACKError(f"index {index} is not in the tables")
                field = table[index]
                total += sizes[index]
            else:
                # A literal (§6.2): with incremental indexing (01), or
                # without (0000) or never (0001) indexed; 001 is a table
                # size update, allowed only before the first field.
                if byte & 0x40:
                    mask = 0x3F
                elif byte & 0x20:
                    raise HPACKError("dynamic table size update after a field")
                else:
                    mask = 0x0F
                if byte & mask:
                    if byte & mask == mask:
                        index, pos = _integer(block, pos, mask)
                    else:
                        index = byte & mask
                        pos += 1
                    if index >= len(table):
                        raise HPACKError(f"index {index} is not in the tables")
                    name = table[index][0]
                else:
                    name, pos = _string(block, pos + 1)
                if pos < end and block[pos] < 0x7F:
                    # A short raw string, the common case, inline.
                    stop = pos + 1 + block[pos]
                    if stop > end:
                        raise HPACKError("header block truncated inside a string")
                    value = block[pos + 1 : stop]
                    pos = stop
                else:
                    value, pos = _string(block, pos)
                field = (name, value)
                total += len(name) + len(value) + 32
                if mask == 0x3F:
                    self._insert(field)
            append(field)
            if total > limit:
                # Decode on, keeping nothing, so the table stays in step.
                fields.clear()
        if total > limit:
            raise HeaderListTooLarge(f"header list of {total} bytes, over {limit}")
        if self._generation == generation and end <= MEMO_BLOCK_SIZE:
            if len(self._memo) >= MEMO_BLOCKS:
                self._memo.clear()
            self._memo[block] = (tuple(fields), total)
        return fields

    def _changed(self) -> None:
        """The dynamic table changed: what the memo holds is stale."""
        self._generation += 1
        self._memo.clear()

    def _resize(self, size: int) -> None:
        """
        A dynamic table size update (§6.3): evict down to C{size}.

        @raise HPACKError: C{size} is over C{max_table_size}.
        """
        if size > self.max_table_size:
            raise HPACKError(f"dynamic table size {size} is over {self.max_table_size}")
        self._size = size
        self._evict(size)
        self._changed()

    def _evict(self, room: int) -> None:
        """Evict the oldest entries until the table uses at most C{room}."""
        table, sizes = self._table, self._sizes
        while self._used > room:
            table.pop()
            self._used -= sizes.pop()

    def _insert(self, field: tuple[bytes, bytes]) -> None:
        """Add C{field} to the dynamic table (§4.4): evict to make room; a
        field larger than the table empties it and is not added."""
        size = len(field[0]) + len(field[1]) + 32
        table, sizes, used = self._table, self._sizes, self._used
        room = max(self._size - size, 0)
        while used > room:
            table.pop()
            used -= sizes.pop()
        if size <= self._size:
            table.insert(_FIRST_DYNAMIC, field)
            sizes.insert(_FIRST_DYNAMIC, size)
            used += size
        self._used = used
        self._changed()


def integer(value: int, bits: int, prefix: int = 0) -> bytes:
    """The integer C{value} on a C{bits}-bit prefix (§5.1), the first byte's
    other bits being C{prefix}."""
    mask = (1 << bits) - 1
    if value < mask:
        return bytes((prefix | value,))
    out = bytearray((prefix | mask,))
    value -= mask
    while value >= 0x80:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)
    return bytes(out)


def literal(name: bytes, value: bytes) -> bytes:
    """
    One field as 'literal without indexing, new name' (§6.2.2), no Huffman
    (for answers).
    """
    return b"\x00" + integer(len(name), 7) + name + integer(len(value), 7) + value


def indexed(index: int) -> bytes:
    """
    One field as an indexed reference (§6.1) to the static table.

    @raise ValueError: C{index} is not in the static table (1 to 61).
    """
    if not 0 < index <= len(STATIC_TABLE):
        raise ValueError(f"{index} is not an index of the static table")
    return bytes((0x80 | index,))
