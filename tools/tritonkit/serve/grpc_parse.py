"""The gRPC guard's parse of a ``ModelInferRequest`` without copying its tensor bytes (:mod:`.grpc_checks`).

A message arrives as the pieces the guard read it in. :func:`parse_infer` walks its top-level fields
only: each ``raw_input_contents`` entry (field 7, length-delimited) is kept as a span of the pieces (its
length is what the checks need; its bytes are joined only where a check reads them, BYTES elements),
and every other field is handed, in order, to protobuf's own parser. Protobuf merges fields one by one
and field 7 only ever appends to ``raw_input_contents``, so the request parsed from the other fields
is exactly the whole message's without its raw contents, and the spans are exactly those contents.

Anything the walk does not take in its stride (groups, a varint not in its shortest form, a tag past
32 bits, more than :data:`MAX_FIELDS` top-level fields) is left to protobuf's parse of the whole
message, as is a message of at most :data:`WHOLE_BYTES` (its copy costs less than the walk); a
message the walk finds truncated is refused as protobuf would refuse it.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2

from tritonkit.errors import TritonKitError

__all__ = ["MAX_FIELDS", "WHOLE_BYTES", "Pieces", "Raw", "parse_infer"]

#: top-level fields the walk takes before it leaves the message to protobuf's own parse
MAX_FIELDS = 1024
#: messages this small are parsed whole by protobuf (a copy of them is cheaper than the walk)
WHOLE_BYTES = 32 << 10
_RAW = 7  # ModelInferRequest.raw_input_contents


class _LeftToProtobufError(TritonKitError):
    """The walk leaves this message to protobuf's parse of all of it."""


class Pieces:
    """Bytes held as a sequence of pieces (slices of what was read), addressed as one run."""

    __slots__ = ("parts", "size", "starts")

    def __init__(self, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        self.parts = list(parts)
        self.starts: list[int] = []
        at = 0
        for part in self.parts:
            self.starts.append(at)
            at += len(part)
        self.size = at

    def slice(self, start: int, end: int) -> bytes | memoryview:
        """Bytes ``start:end`` (a view where they lie in one piece, else joined)."""
        index = bisect.bisect_right(self.starts, start) - 1
        part, base = self.parts[index], self.starts[index]
        if end - base <= len(part):
            return memoryview(part)[start - base : end - base]
        out = [memoryview(part)[start - base :]]
        got = len(part) - (start - base)
        while got < end - start:
            index += 1
            part = self.parts[index]
            take = min(len(part), end - start - got)
            out.append(memoryview(part)[:take])
            got += take
        return b"".join(out)

    def whole(self) -> bytes | memoryview:
        if len(self.parts) == 1:
            return memoryview(self.parts[0])
        return b"".join(self.parts)


class Raw:
    """One ``raw_input_contents`` entry: its length, and its bytes on demand (joined where it is cut)."""

    __slots__ = ("pieces", "size", "start")

    def __init__(self, pieces: Pieces, start: int, size: int) -> None:
        self.pieces, self.start, self.size = pieces, start, size

    def __len__(self) -> int:
        return self.size

    def data(self) -> bytes | memoryview:
        return self.pieces.slice(self.start, self.start + self.size)


def _varint(pieces: Pieces, at: int) -> tuple[int, int]:
    """(value, the offset after it) of a varint in its shortest form; raises _LeftToProtobufError otherwise."""
    chunk = pieces.slice(at, min(at + 10, pieces.size))
    value = shift = 0
    for i, byte in enumerate(chunk):
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if (byte == 0 and i) or (i == 9 and byte > 1):
                raise _LeftToProtobufError  # overlong or past 64 bits: protobuf decides
            return value, at + i + 1
        shift += 7
    if len(chunk) < 10:
        raise DecodeError("truncated varint")
    raise _LeftToProtobufError


def _walk(pieces: Pieces) -> tuple[bytes, list[tuple[int, int]]]:
    """(the message's fields but field 7, joined; the (start, length) of each field-7 entry)."""
    head: list[bytes | bytearray | memoryview] = []
    raws: list[tuple[int, int]] = []
    at, size, fields = 0, pieces.size, 0
    while at < size:
        fields += 1
        if fields > MAX_FIELDS:
            raise _LeftToProtobufError
        tag, after = _varint(pieces, at)
        number, wire = tag >> 3, tag & 7
        if tag >> 32 or not number:
            raise _LeftToProtobufError  # protobuf refuses these in its own words
        if wire == 0:
            _, end = _varint(pieces, after)
        elif wire == 1:
            end = after + 8
        elif wire == 5:
            end = after + 4
        elif wire == 2:
            length, after = _varint(pieces, after)
            end = after + length
        else:
            raise _LeftToProtobufError  # groups (3, 4) and the invalid wire types 6, 7
        if end > size:
            raise DecodeError("a field past the message's end")
        if number == _RAW and wire == 2:
            raws.append((after, end - after))
        else:
            head.append(pieces.slice(at, end))
        at = end
    return b"".join(head), raws


def parse_infer(
    message: bytes | bytearray | memoryview | Sequence[bytes | bytearray | memoryview],
    *,
    whole_bytes: int = WHOLE_BYTES,
) -> tuple[service_pb2.ModelInferRequest, list[Raw] | list[bytes]]:
    """(the request without its raw contents (or with them, where protobuf parsed it whole), each raw
    content: a :class:`Raw` span, or protobuf's bytes); raises ``DecodeError`` as protobuf's
    parse of the whole message would. A message of at most ``whole_bytes`` is parsed whole."""
    if isinstance(message, bytes | bytearray | memoryview):
        message = [message]
    if len(message) == 1 and len(message[0]) <= whole_bytes:  # a small message in one piece
        request = service_pb2.ModelInferRequest.FromString(bytes(message[0]))
        return request, list(request.raw_input_contents)
    pieces = Pieces(message)
    if pieces.size > whole_bytes:
        try:
            head, spans = _walk(pieces)
        except _LeftToProtobufError:
            pass
        else:
            request = service_pb2.ModelInferRequest.FromString(head)
            return request, [Raw(pieces, start, size) for start, size in spans]
    whole = pieces.whole()
    request = service_pb2.ModelInferRequest.FromString(
        bytes(whole) if isinstance(whole, memoryview) else whole
    )
    return request, list(request.raw_input_contents)
