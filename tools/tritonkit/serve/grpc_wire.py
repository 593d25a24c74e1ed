"""HTTP/2 pieces the gRPC guard needs (RFC 9113, RFC 7541): frame headers, HPACK blocks, gRPC trailers.

The guard relays header blocks from the client to Triton as they are (Triton's HPACK decoder follows the
client's encoder) and decodes each with its own ``hpack.Decoder`` to learn the method. Blocks from Triton
to the client are decoded and written anew by :func:`encode_block`, from the static table and literals
never added to the client's dynamic table, so the guard can drop or add header blocks (a refusal's
trailers) without the client's HPACK state ever differing from what it was sent. Decoded blocks are
cached while they consist of indexed fields only, which cannot change a decoder's table (RFC 7541
§6.1), and so are their new encodings (:meth:`BlockDecoder.recode`); a block with literals clears both.
"""

from __future__ import annotations

import struct
from urllib.parse import quote

import hpack
from hpack.table import HeaderTable

__all__ = [
    "CONTINUATION",
    "DATA",
    "END_HEADERS",
    "END_STREAM",
    "FRAME",
    "GOAWAY",
    "HEADERS",
    "PADDED",
    "PING",
    "PREFACE",
    "PRIORITY_FLAG",
    "RST_STREAM",
    "SETTINGS",
    "WINDOW_UPDATE",
    "BlockDecoder",
    "encode_block",
    "frame",
    "header_fragment",
    "trailers",
]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
FRAME = struct.Struct(">HBBBL")  # length (24 bits as 16 + 8), type, flags, stream id
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    range(10)
)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
_STATIC: dict[tuple[bytes, bytes], int] = {}
_STATIC_NAMES: dict[bytes, int] = {}
for _index, (_name, _value) in enumerate(HeaderTable.STATIC_TABLE, 1):
    _STATIC.setdefault((_name, _value), _index)
    _STATIC_NAMES.setdefault(_name, _index)
_CACHE_ENTRIES = 512


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    size = len(payload)
    return FRAME.pack(size >> 8, size & 0xFF, kind, flags, stream_id) + payload


def _integer(value: int, bits: int, first: int) -> bytes:
    limit = (1 << bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 127) | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_block(fields: list[tuple[bytes, bytes]]) -> bytes:
    """A header block of static-table references and literals without indexing (no table changes)."""
    out = bytearray()
    for name, value in fields:
        index = _STATIC.get((name, value))
        if index:
            out += _integer(index, 7, 0x80)
            continue
        index = _STATIC_NAMES.get(name, 0)
        out += _integer(index, 4, 0x00)
        if not index:
            out += _integer(len(name), 7, 0) + name
        out += _integer(len(value), 7, 0) + value
    return bytes(out)


def _indexed_only(block: bytes) -> bool:
    i, n = 0, len(block)
    while i < n:
        first = block[i]
        if not first & 0x80:
            return False
        i += 1
        if first & 0x7F == 0x7F:
            while i < n and block[i] & 0x80:
                i += 1
            i += 1
    return True


def header_fragment(flags: int, payload: bytes) -> bytes:
    """A HEADERS frame's block fragment without its padding and priority fields (§6.2)."""
    start, end = 0, len(payload)
    if flags & PADDED:
        if not payload:
            raise ValueError("a padded HEADERS frame without its pad length")
        start, end = 1, end - payload[0]
    if flags & PRIORITY_FLAG:
        start += 5
    if start > end:
        raise ValueError("HEADERS padding past the frame")
    return payload[start:end]


class BlockDecoder:
    """An ``hpack.Decoder`` with a cache of the blocks that cannot change its table."""

    def __init__(self, max_header_list_size: int) -> None:
        self.decoder = hpack.Decoder(max_header_list_size=max_header_list_size)
        self._cache: dict[bytes, list[tuple[bytes, bytes]]] = {}
        self._encoded: dict[bytes, bytes] = {}

    def decode(self, block: bytes) -> list[tuple[bytes, bytes]]:
        """The block's fields (raises ``hpack.HPACKError`` on a bad block: a connection error)."""
        fields = self._cache.get(block)
        if fields is not None:
            return fields
        fields = [(bytes(name), bytes(value)) for name, value in self.decoder.decode(block, raw=True)]
        if _indexed_only(block):
            if len(self._cache) >= _CACHE_ENTRIES:
                self._cache.clear()
            self._cache[block] = fields
        else:
            self._cache.clear()
            self._encoded.clear()
        return fields

    def recode(self, block: bytes) -> bytes:
        """The block decoded and written anew by :func:`encode_block` (cached as :meth:`decode` is)."""
        encoded = self._encoded.get(block)
        if encoded is not None:
            return encoded
        encoded = encode_block(self.decode(block))
        if block in self._cache:
            if len(self._encoded) >= _CACHE_ENTRIES:
                self._encoded.clear()
            self._encoded[block] = encoded
        return encoded


def trailers(code: int, message: str, *, with_head: bool) -> bytes:
    """The header block of a gRPC answer that is only its status (``with_head``: ``:status`` and
    ``content-type`` first, a trailers-only response)."""
    fields = [
        (b"grpc-status", str(code).encode()),
        (b"grpc-message", quote(message[:300], safe=" ").encode()),
    ]
    if with_head:
        fields = [(b":status", b"200"), (b"content-type", b"application/grpc"), *fields]
    return encode_block(fields)
