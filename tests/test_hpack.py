"""
beacon.bindings.grpc._hpack decodes RFC 7541's header blocks (Appendix C's
examples, grpc-python's blocks), keeps its dynamic table in step with the
peer's encoder, refuses every malformed block with HPACKError, stops at its
limits (each crossed, and met at the line), and answers from its memo only
what the table still says.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beacon.bindings.grpc import _hpack as hpack
from beacon.bindings.grpc._hpack import (
    HUFFMAN_CODE,
    MEMO_BLOCK_SIZE,
    MEMO_BLOCKS,
    STATIC_TABLE,
    Decoder,
    HeaderListTooLarge,
    HPACKError,
    indexed,
    literal,
)

Fields = list[tuple[bytes, bytes]]


def h(text: str) -> bytes:
    """Bytes from RFC-style hex, spaces and newlines allowed."""
    return bytes.fromhex("".join(text.split()))


def code_bits(data: bytes) -> str:
    """C{data}'s Huffman code (RFC 7541 §5.2), as a string of bits."""
    return "".join(format(HUFFMAN_CODE[b][0], f"0{HUFFMAN_CODE[b][1]}b") for b in data)


def huffman(data: bytes, padding: str | None = None) -> bytes:
    """
    Huffman-code C{data} with the module's code table; the padding is all
    ones to the next byte unless C{padding} gives its bits.
    """
    bits = code_bits(data)
    bits += "1" * (-len(bits) % 8) if padding is None else padding
    assert len(bits) % 8 == 0
    return int(bits, 2).to_bytes(len(bits) // 8, "big") if bits else b""


def string(data: bytes, *, huffman_coded: bool = False) -> bytes:
    """A string literal (§5.2), raw or already Huffman-coded."""
    return hpack.integer(len(data), 7, 0x80 if huffman_coded else 0) + data


def with_huffman_value(value_code: bytes, name: bytes = b"x") -> bytes:
    """A block of one literal without indexing whose value is C{value_code}."""
    return b"\x00" + string(name) + string(value_code, huffman_coded=True)


def entries_size(decoder: Decoder) -> int:
    return sum(len(n) + len(v) + 32 for n, v in decoder.dynamic_table)


# RFC 7541 Appendix C.3 (requests, no Huffman) and C.4 (the same, Huffman):
# the blocks, the lists, then the dynamic table (newest first) after each.
REQUEST_LISTS: list[Fields] = [
    [(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b":authority", b"www.example.com")],
    [(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b":authority", b"www.example.com"),
     (b"cache-control", b"no-cache")],
    [(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/index.html"),
     (b":authority", b"www.example.com"), (b"custom-key", b"custom-value")],
]
REQUEST_TABLES: list[Fields] = [
    [(b":authority", b"www.example.com")],
    [(b"cache-control", b"no-cache"), (b":authority", b"www.example.com")],
    [(b"custom-key", b"custom-value"), (b"cache-control", b"no-cache"), (b":authority", b"www.example.com")],
]
REQUEST_SIZES = [57, 110, 164]
C3 = [
    h("8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d"),
    h("8286 84be 5808 6e6f 2d63 6163 6865"),
    h("8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65"),
]
C4 = [
    h("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff"),
    h("8286 84be 5886 a8eb 1064 9cbf"),
    h("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf"),
]

# Appendix C.5 (responses, no Huffman) and C.6 (Huffman), a 256-byte table.
DATE1 = b"Mon, 21 Oct 2013 20:13:21 GMT"
DATE2 = b"Mon, 21 Oct 2013 20:13:22 GMT"
LOCATION = (b"location", b"https://www.example.com")
COOKIE = (b"set-cookie", b"foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1")
RESPONSE_LISTS: list[Fields] = [
    [(b":status", b"302"), (b"cache-control", b"private"), (b"date", DATE1), LOCATION],
    [(b":status", b"307"), (b"cache-control", b"private"), (b"date", DATE1), LOCATION],
    [(b":status", b"200"), (b"cache-control", b"private"), (b"date", DATE2), LOCATION,
     (b"content-encoding", b"gzip"), COOKIE],
]
RESPONSE_TABLES: list[Fields] = [
    [LOCATION, (b"date", DATE1), (b"cache-control", b"private"), (b":status", b"302")],
    [(b":status", b"307"), LOCATION, (b"date", DATE1), (b"cache-control", b"private")],
    [COOKIE, (b"content-encoding", b"gzip"), (b"date", DATE2)],
]
RESPONSE_SIZES = [222, 222, 215]
C5 = [
    h("""4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
         2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
         6c65 2e63 6f6d"""),
    h("4803 3330 37c1 c0bf"),
    h("""88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
         54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
         5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
         3d31"""),
]
C6 = [
    h("""4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
         2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3"""),
    h("4883 640e ffc1 c0bf"),
    h("""88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
         77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
         9587 3160 65c0 03ed 4ee5 b106 3d50 07"""),
]

# grpc-python's first three blocks on a connection: two calls' first blocks,
# then the steady block grpc-core sends for every later call.
GRPC_BLOCKS = [
    h("40053a70617468212f6c662e6132612e76312e413241536572766963652f53656e644d657373616765400a3a617574"
      "686f726974790f3132372e302e302e313a35303037328386400c636f6e74656e742d74797065106170706c69636174"
      "696f6e2f677270634002746508747261696c6572734014677270632d6163636570742d656e636f64696e6717696465"
      "6e746974792c206465666c6174652c20677a6970400c677270632d74696d656f757403313053400a757365722d6167"
      "656e7438677270632d707974686f6e2d6173796e63696f2f312e38352e3420677270632d632f35382e302e3020286c"
      "696e75783b2063687474703229000b6132612d76657273696f6e03312e30"),
    h("40053a706174681d2f6c662e6132612e76312e413241536572766963652f4765745461736bc48386c3c2c1c0bf000b61"
      "32612d76657273696f6e03312e30"),
    h("bfc58386c4c3c2c1c0000b6132612d76657273696f6e03312e30"),
]
SEND = (b":path", b"/lf.a2a.v1.A2AService/SendMessage")
GET = (b":path", b"/lf.a2a.v1.A2AService/GetTask")
AUTHORITY = (b":authority", b"127.0.0.1:50072")
CONTENT_TYPE = (b"content-type", b"application/grpc")
TE = (b"te", b"trailers")
ACCEPT = (b"grpc-accept-encoding", b"identity, deflate, gzip")
TIMEOUT = (b"grpc-timeout", b"10S")
AGENT = (b"user-agent", b"grpc-python-asyncio/1.85.4 grpc-c/58.0.0 (linux; chttp2)")
VERSION = (b"a2a-version", b"1.0")
POST, HTTP = (b":method", b"POST"), (b":scheme", b"http")


def test_static_table() -> None:
    """Appendix A: 61 entries, index 1 first."""
    assert len(STATIC_TABLE) == 61
    assert STATIC_TABLE[0] == (b":authority", b"")
    assert STATIC_TABLE[1] == (b":method", b"GET")
    assert STATIC_TABLE[7] == (b":status", b"200")
    assert STATIC_TABLE[15] == (b"accept-encoding", b"gzip, deflate")
    assert STATIC_TABLE[30] == (b"content-type", b"")
    assert STATIC_TABLE[60] == (b"www-authenticate", b"")
    decoder = Decoder()
    assert list(decoder.decode(bytes(range(0x81, 0x81 + 61)))) == list(STATIC_TABLE)


def test_huffman_code_table() -> None:
    """
    Appendix B's code: 257 codes, a complete prefix code (Kraft's sum is 1),
    canonical (consecutive in the order of length, then symbol), with the
    RFC's values where checked by hand.
    """
    assert len(HUFFMAN_CODE) == 257
    assert sum(Fraction(1, 2**length) for _, length in HUFFMAN_CODE) == 1
    code, previous = -1, 0
    for symbol in sorted(range(257), key=lambda s: (HUFFMAN_CODE[s][1], s)):
        length = HUFFMAN_CODE[symbol][1]
        code = (code + 1) << (length - previous)
        previous = length
        assert HUFFMAN_CODE[symbol] == (code, length)
    assert HUFFMAN_CODE[0] == (0x1FF8, 13)
    assert HUFFMAN_CODE[ord(" ")] == (0x14, 6)
    assert HUFFMAN_CODE[ord("0")] == (0x0, 5)
    assert HUFFMAN_CODE[ord("a")] == (0x3, 5)
    assert HUFFMAN_CODE[ord("~")] == (0x1FFD, 13)
    assert HUFFMAN_CODE[255] == (0x3FFFFEE, 26)
    assert HUFFMAN_CODE[256] == (0x3FFFFFFF, 30)


@pytest.mark.parametrize("symbol", range(256))
def test_huffman_every_symbol(symbol: int) -> None:
    """Every symbol decodes alone, doubled, and after each padding offset."""
    decoder = Decoder()
    for data in (bytes([symbol]), bytes([symbol, symbol]), b"a" + bytes([symbol]), b"0ab" + bytes([symbol]) + b"~"):
        assert list(decoder.decode(with_huffman_value(huffman(data)))) == [(b"x", data)]


def test_huffman_all_symbols_in_one_string() -> None:
    data = bytes(range(256)) + bytes(range(255, -1, -1))
    assert list(Decoder().decode(with_huffman_value(huffman(data)))) == [(b"x", data)]
    assert list(Decoder().decode(b"\x00" + string(huffman(data), huffman_coded=True) + b"\x00")) == [(data, b"")]


def test_huffman_padding() -> None:
    """
    Padding of up to 7 bits, all ones, ends a string; 8 bits or more, a
    zero in it, an unfinished code or EOS is an HPACKError.
    """
    # "a" and "0" are 5 bits: 3 bits of padding; "a" and symbol 0 (13): 18
    # bits, 6; "aa" then symbol 0 and 255 (26): 49 bits, 7.
    for data in (b"", b"a", b"a0", b"a\x00", b"aa\x00\xff"):
        assert list(Decoder().decode(with_huffman_value(huffman(data)))) == [(b"x", data)]
    assert len(code_bits(b"aa\x00\xff")) % 8 == 1
    bad = [
        huffman(b"a") + b"\xff",  # 11 bits of padding
        huffman(b"") + b"\xff",  # 8 bits
        huffman(b"aa\x00\xff") + b"\xff",  # 15 bits
        huffman(b"a", padding="110"),  # a zero in the padding
        huffman(b"a", padding="011"),
        huffman(b"aa\x00\xff", padding="1111110"),
        huffman(b"a", padding="000" + "0" * 8),  # "0" then an unfinished code
        huffman(b"", padding=format(HUFFMAN_CODE[256][0], "030b") + "11"),  # EOS
        huffman(b"a", padding="1" * 30 + "00000"),  # EOS, then "0"
    ]
    for code in bad:
        with pytest.raises(HPACKError):
            Decoder().decode(with_huffman_value(code))


def test_single_representations() -> None:
    """Appendix C.2: one field each, and the dynamic table after it."""
    decoder = Decoder()
    block = h("400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572")
    assert list(decoder.decode(block)) == [(b"custom-key", b"custom-header")]
    assert decoder.dynamic_table == [(b"custom-key", b"custom-header")]
    assert entries_size(decoder) == 55
    for block, field in [
        (h("040c 2f73 616d 706c 652f 7061 7468"), (b":path", b"/sample/path")),
        (h("1008 7061 7373 776f 7264 0673 6563 7265 74"), (b"password", b"secret")),
        (h("82"), (b":method", b"GET")),
    ]:
        decoder = Decoder()
        assert list(decoder.decode(block)) == [field]
        assert decoder.dynamic_table == []


@pytest.mark.parametrize("blocks", [C3, C4], ids=["C.3", "C.4"])
def test_requests(blocks: list[bytes]) -> None:
    """Appendix C.3 and C.4: three requests on one connection."""
    decoder = Decoder()
    for block, fields, table, size in zip(blocks, REQUEST_LISTS, REQUEST_TABLES, REQUEST_SIZES):
        assert list(decoder.decode(block)) == fields
        assert decoder.dynamic_table == table
        assert entries_size(decoder) == size


@pytest.mark.parametrize("blocks", [C5, C6], ids=["C.5", "C.6"])
def test_responses(blocks: list[bytes]) -> None:
    """Appendix C.5 and C.6: three responses, a 256-byte table, evictions."""
    decoder = Decoder(max_table_size=256)
    for block, fields, table, size in zip(blocks, RESPONSE_LISTS, RESPONSE_TABLES, RESPONSE_SIZES):
        assert list(decoder.decode(block)) == fields
        assert decoder.dynamic_table == table
        assert entries_size(decoder) == size


def test_grpc_python_blocks() -> None:
    """grpc-python's blocks: two first blocks, then the steady one, twice."""
    decoder = Decoder()
    assert list(decoder.decode(GRPC_BLOCKS[0])) == [SEND, AUTHORITY, POST, HTTP, CONTENT_TYPE, TE, ACCEPT, TIMEOUT,
                                              AGENT, VERSION]
    assert decoder.dynamic_table == [AGENT, TIMEOUT, ACCEPT, TE, CONTENT_TYPE, AUTHORITY, SEND]
    assert list(decoder.decode(GRPC_BLOCKS[1])) == [GET, AUTHORITY, POST, HTTP, CONTENT_TYPE, TE, ACCEPT, TIMEOUT,
                                              AGENT, VERSION]
    assert decoder.dynamic_table == [GET, AGENT, TIMEOUT, ACCEPT, TE, CONTENT_TYPE, AUTHORITY, SEND]
    steady = [AGENT, SEND, POST, HTTP, AUTHORITY, CONTENT_TYPE, TE, ACCEPT, TIMEOUT, VERSION]
    assert list(decoder.decode(GRPC_BLOCKS[2])) == steady
    remembered = decoder.decode(GRPC_BLOCKS[2])
    assert list(remembered) == steady
    # From the memo: the very tuple each time, so a caller may key on it.
    assert type(remembered) is tuple and decoder.decode(GRPC_BLOCKS[2]) is remembered
    assert len(decoder.dynamic_table) == 8


def test_indexed_out_of_range() -> None:
    """Index 0 and an index past the tables are HPACKErrors; the last is not."""
    for block in (b"\x80", b"\xbe", b"\xff\x00", b"\x82\xbf", b"\x7e\x00", b"\x0f\x2f\x00", b"\x1f\x2f\x00",
                  b"\x7f\x01\x00"):
        with pytest.raises(HPACKError):
            Decoder().decode(block)
    assert list(Decoder().decode(b"\xbd")) == [STATIC_TABLE[60]]
    assert list(Decoder().decode(b"\x0f\x2e\x01v")) == [(b"www-authenticate", b"v")]
    decoder = Decoder()
    decoder.decode(b"\x40\x01a\x01b")
    assert list(decoder.decode(b"\xbe\x7e\x01c")) == [(b"a", b"b"), (b"a", b"c")]
    assert list(decoder.decode(b"\xbe\xbf")) == [(b"a", b"c"), (b"a", b"b")]
    with pytest.raises(HPACKError):
        decoder.decode(b"\xc0")


def test_literal_forms() -> None:
    """Each literal form, with an indexed or a new name; only the first
    (incremental indexing) adds to the table."""
    decoder = Decoder()
    for block in (b"\x04\x01/", b"\x14\x01/", b"\x00\x01n\x01v", b"\x10\x01n\x01v"):
        assert decoder.decode(block)[0][1] in (b"/", b"v")
        assert decoder.dynamic_table == []
    assert list(decoder.decode(b"\x44\x01/")) == [(b":path", b"/")]
    assert list(decoder.decode(b"\x40\x01n\x01v")) == [(b"n", b"v")]
    assert decoder.dynamic_table == [(b"n", b"v"), (b":path", b"/")]
    # Names come back as sent, uppercase too.
    assert list(decoder.decode(b"\x00\x01N\x00")) == [(b"N", b"")]


def test_integers() -> None:
    """
    Appendix C.1's integers; an integer of 2**32 - 1 and one of 5
    continuation bytes are taken; 2**32, a sixth continuation byte, or an
    integer cut short are HPACKErrors, however long the block.
    """
    assert hpack.integer(10, 5, 0x20) == b"\x2a"
    assert hpack.integer(1337, 5, 0x20) == b"\x3f\x9a\x0a"
    assert hpack.integer(42, 8, 0) == b"\x2a"
    decoder = Decoder(max_table_size=2**32 - 1)
    decoder.decode(b"\x3f\x9a\x0a")
    assert decoder.table_size == 1337
    decoder.decode(hpack.integer(2**32 - 1, 5, 0x20))
    assert decoder.table_size == 2**32 - 1
    with pytest.raises(HPACKError, match="2\\*\\*32"):
        decoder.decode(hpack.integer(2**32, 5, 0x20))
    decoder = Decoder()
    decoder.decode(b"\x3f\x80\x80\x80\x80\x00")
    assert decoder.table_size == 31
    for block in (b"\x3f\x80\x80\x80\x80\x80\x00", b"\x3f" + b"\xff" * 16384, b"\x3f\x80", b"\xff", b"\xff\x80",
                  b"\x00\x7f", b"\x00\x01a\x7f\xff"):
        with pytest.raises(HPACKError):
            Decoder().decode(block)


def test_table_size_updates() -> None:
    """
    Updates at the start of a block, up to max_table_size, are taken and
    evict; one after a field, or over the maximum, is an HPACKError.
    """
    decoder = Decoder(max_table_size=256)
    decoder.decode(C5[0])
    assert list(decoder.decode(b"\x3f\xe1\x01")) == []  # 256: at the line
    assert len(decoder.dynamic_table) == 4
    assert list(decoder.decode(b"\x3f\x61\xbe")) == [LOCATION]  # 128: two entries, 63 + 65 bytes
    assert decoder.dynamic_table == [LOCATION, (b"date", DATE1)]
    assert list(decoder.decode(b"\x3f\x60\xbe")) == [LOCATION]  # 127: one
    assert decoder.dynamic_table == [LOCATION]
    assert list(decoder.decode(b"\x20\x3f\xe1\x01")) == []  # two updates: 0, then 256
    assert decoder.dynamic_table == []
    assert decoder.table_size == 256
    with pytest.raises(HPACKError):
        decoder.decode(b"\xbe")
    for block in (b"\x3f\xe2\x01", b"\x82\x20", b"\x20\x82\x3f\x01"):
        with pytest.raises(HPACKError):
            Decoder(max_table_size=256).decode(block)
    # A table of size 0 holds nothing.
    decoder = Decoder(max_table_size=0)
    assert list(decoder.decode(b"\x40\x01n\x01v")) == [(b"n", b"v")]
    assert decoder.dynamic_table == []


def test_eviction() -> None:
    """
    §4.4: an entry as large as the table fits alone; one byte larger, it
    empties the table; a name taken from the entry being evicted is kept.
    """
    decoder = Decoder(max_table_size=68)
    decoder.decode(b"\x40\x01a\x01b")
    decoder.decode(b"\x40\x01c\x01d")
    assert decoder.dynamic_table == [(b"c", b"d"), (b"a", b"b")]  # 34 + 34
    decoder.decode(b"\x40\x01e\x23" + b"f" * 35)  # 1 + 35 + 32: the table's size
    assert decoder.dynamic_table == [(b"e", b"f" * 35)]
    assert list(decoder.decode(b"\x7e\x24" + b"g" * 36)) == [(b"e", b"g" * 36)]  # one byte over
    assert decoder.dynamic_table == []
    decoder = Decoder(max_table_size=34)
    decoder.decode(b"\x40\x01a\x01b")
    assert list(decoder.decode(b"\x7e\x01c\xbe")) == [(b"a", b"c"), (b"a", b"c")]
    assert decoder.dynamic_table == [(b"a", b"c")]


def test_truncated() -> None:
    """
    Every prefix of a block is either a block of whole fields (its list a
    prefix of the whole block's) or an HPACKError.
    """
    for blocks, size in [(C3, 4096), (C4, 4096), (C5, 256), (C6, 256), (GRPC_BLOCKS, 4096)]:
        for number, block in enumerate(blocks):
            whole = Decoder(max_table_size=size)
            for earlier in blocks[:number]:
                whole.decode(earlier)
            expected = whole.decode(block)
            refused = 0
            for cut in range(len(block)):
                decoder = Decoder(max_table_size=size)
                for earlier in blocks[:number]:
                    decoder.decode(earlier)
                try:
                    fields = decoder.decode(block[:cut])
                except HPACKError:
                    refused += 1
                    continue
                assert fields == expected[: len(fields)]
            assert refused >= len(block) - len(expected)


def test_header_list_size() -> None:
    """
    A list of exactly max_header_list_size is returned; one byte more is
    HeaderListTooLarge, after the block was decoded whole: the next block
    finds the table in step.
    """
    size = sum(len(n) + len(v) + 32 for n, v in REQUEST_LISTS[0])
    assert list(Decoder(max_header_list_size=size).decode(C3[0])) == REQUEST_LISTS[0]
    decoder = Decoder(max_header_list_size=size - 1)
    with pytest.raises(HeaderListTooLarge):
        decoder.decode(C3[0])
    assert decoder.dynamic_table == REQUEST_TABLES[0]
    decoder.max_header_list_size = 16384
    assert list(decoder.decode(C3[1])) == REQUEST_LISTS[1]
    # Over the limit on the first field, the rest still indexed.
    decoder = Decoder(max_header_list_size=40)
    with pytest.raises(HeaderListTooLarge):
        decoder.decode(b"\x40\x01n\x08" + b"v" * 8 + b"\x40\x01m\x01w")
    assert decoder.dynamic_table == [(b"m", b"w"), (b"n", b"v" * 8)]
    assert list(decoder.decode(b"\xbe")) == [(b"m", b"w")]
    # Indexed references to a large entry: a small block, a list over it.
    decoder = Decoder()
    decoder.decode(b"\x40\x01n" + hpack.integer(4000, 7, 0) + b"v" * 4000)
    with pytest.raises(HeaderListTooLarge):
        decoder.decode(b"\xbe" * 5)
    assert list(decoder.decode(b"\xbe" * 4)) == [(b"n", b"v" * 4000)] * 4


def test_memo() -> None:
    """
    A block is answered from the memo only while the table is as it was:
    after an insertion, an eviction or a size update, the same bytes give
    the table's new answer; a returned list is the caller's own.
    """
    decoder = Decoder(max_table_size=100)
    decoder.decode(b"\x40\x01a\x01b")
    first = decoder.decode(b"\xbe\x82")
    assert first == [(b"a", b"b"), (b":method", b"GET")]
    first.append((b"x", b"y"))
    assert list(decoder.decode(b"\xbe\x82")) == [(b"a", b"b"), (b":method", b"GET")]
    decoder.decode(b"\x40\x01c\x01d")  # an insertion
    assert list(decoder.decode(b"\xbe\x82")) == [(b"c", b"d"), (b":method", b"GET")]
    assert list(decoder.decode(b"\xbf")) == [(b"a", b"b")]
    decoder.decode(b"\x40\x01e\x01f")  # an insertion and an eviction
    assert list(decoder.decode(b"\xbe\x82")) == [(b"e", b"f"), (b":method", b"GET")]
    assert list(decoder.decode(b"\xbf")) == [(b"c", b"d")]
    with pytest.raises(HPACKError):
        decoder.decode(b"\xc0")
    decoder.decode(b"\x3f\x05")  # 36: a size update evicting one
    assert list(decoder.decode(b"\xbe")) == [(b"e", b"f")]
    with pytest.raises(HPACKError):
        decoder.decode(b"\xbf")
    # A block that changes the table is never answered from the memo.
    block = b"\x40\x01g\x01h\xbe\xbe"
    assert list(decoder.decode(block)) == [(b"g", b"h")] * 3
    assert list(decoder.decode(block)) == [(b"g", b"h")] * 3
    # A lower limit holds for a remembered block too.
    decoder.decode(b"\x82\x82")
    decoder.max_header_list_size = 2 * 42 - 1
    with pytest.raises(HeaderListTooLarge):
        decoder.decode(b"\x82\x82")


def test_memo_bounded() -> None:
    """The memo holds at most MEMO_BLOCKS blocks of MEMO_BLOCK_SIZE bytes."""
    decoder = Decoder()
    for n in range(3 * MEMO_BLOCKS):
        assert list(decoder.decode(b"\x00\x01n" + hpack.integer(n, 7, 0) + b"v" * n)) == [(b"n", b"v" * n)]
        assert len(decoder._memo) <= MEMO_BLOCKS
    decoder = Decoder()
    value = MEMO_BLOCK_SIZE - 6
    block = b"\x00\x01n" + hpack.integer(value, 7, 0) + b"v" * value
    assert len(block) == MEMO_BLOCK_SIZE
    decoder.decode(block)
    assert len(decoder._memo) == 1
    decoder.decode(block + b"\x82")
    assert len(decoder._memo) == 1


def test_encoders() -> None:
    """literal() and indexed() give blocks the decoder reads back."""
    assert literal(b":status", b"200") == b"\x00\x07:status\x03200"
    assert indexed(8) == b"\x88"
    long = b"v" * 300
    block = indexed(8) + literal(b"content-type", b"application/grpc") + literal(b"n" * 127, long) + indexed(61)
    assert list(Decoder().decode(block)) == [(b":status", b"200"), (b"content-type", b"application/grpc"),
                                       (b"n" * 127, long), STATIC_TABLE[60]]
    assert list(Decoder().decode(b"".join(indexed(i) for i in range(1, 62)))) == list(STATIC_TABLE)
    for index in (0, 62, -1):
        with pytest.raises(ValueError):
            indexed(index)


class Encoder:
    """
    A test's HPACK encoder, with its own model of the dynamic table, which
    chooses each field's representation from the hypothesis draw.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.table: Fields = []
        self.changed = False

    def _used(self) -> int:
        return sum(len(n) + len(v) + 32 for n, v in self.table)

    def _add(self, field: tuple[bytes, bytes]) -> None:
        self.changed = True
        size = len(field[0]) + len(field[1]) + 32
        while self.table and self._used() + size > self.size:
            self.table.pop()
        if size <= self.size:
            self.table.insert(0, field)

    def resize(self, size: int) -> bytes:
        self.size = size
        self.changed = True
        while self._used() > size:
            self.table.pop()
        return hpack.integer(size, 5, 0x20)

    def encode(self, field: tuple[bytes, bytes], form: int, coded: bool) -> bytes:
        """
        C{field} as form 0: indexed if in the tables, else as form 3; 1:
        literal without indexing; 2: never indexed; 3: with incremental
        indexing (a name in the tables by its index); strings Huffman-coded
        if C{coded}.
        """
        everything = list(STATIC_TABLE) + self.table
        string_of = lambda s: string(huffman(s), huffman_coded=True) if coded else string(s)  # noqa: E731
        if form == 0 and field in everything:
            return hpack.integer(everything.index(field) + 1, 7, 0x80)
        names = [n for n, _ in everything]
        prefix, bits = [(0x40, 6), (0x00, 4), (0x10, 4), (0x40, 6)][form]
        if field[0] in names:
            head = hpack.integer(names.index(field[0]) + 1, bits, prefix)
        else:
            head = bytes([prefix]) + string_of(field[0])
        if prefix == 0x40:
            self._add(field)
        return head + string_of(field[1])


NAMES = st.sampled_from([b":path", b":authority", b"te", b"x-a", b"x-b", b"content-type"]) | st.binary(max_size=8)
VALUES = st.sampled_from([b"", b"trailers", b"v", b"application/grpc"]) | st.binary(max_size=60)
BLOCKS = st.lists(
    st.tuples(
        st.none() | st.sampled_from([0, 40, 100, 256]),
        st.lists(st.tuples(NAMES, VALUES, st.integers(0, 3), st.booleans()), max_size=8),
    ),
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(BLOCKS)
def test_in_step_with_an_encoder(blocks: list[tuple[int | None, list[tuple[bytes, bytes, int, bool]]]]) -> None:
    """
    Blocks from an encoder using every representation, Huffman or not,
    with table size updates, decode to what was encoded, each block twice
    (the second from the memo where the block changes nothing), and leave
    the decoder's table as the encoder's.
    """
    encoder = Encoder(256)
    decoder = Decoder(max_table_size=256)
    for resize, fields in blocks:
        encoder.changed = False
        block = b"" if resize is None else encoder.resize(resize)
        block += b"".join(encoder.encode((n, v), form, coded) for n, v, form, coded in fields)
        expected = [(n, v) for n, v, _, _ in fields]
        assert list(decoder.decode(block)) == expected
        assert decoder.dynamic_table == encoder.table
        if not encoder.changed:
            assert list(decoder.decode(block)) == expected
            assert decoder.dynamic_table == encoder.table
