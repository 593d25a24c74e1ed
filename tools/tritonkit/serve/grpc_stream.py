"""One call's stream in the gRPC guard (:mod:`.grpc_relay`): its state, the checks of a message's 5-byte
prefix, and the bounded inflating of a compressed message.

A stream's messages are held as the pieces they were read in (slices of the reads, never copied into
one buffer) and go on to Triton only whole and checked: Triton 2.51 answers a call whose message it
holds only part of (1 MB of a declared 4 MB) by parsing that part, so a partial message never reaches it.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Any, Protocol

from tritonkit.errors import TritonKitError
from tritonkit.serve.grpc_checks import INVALID_ARGUMENT, RESOURCE_EXHAUSTED, CallRefusedError

__all__ = ["ConfigMissingError", "GrpcGuard", "Piece", "Stream", "inflate", "open_message"]

_PREFIX = struct.Struct(">BI")
Piece = memoryview | bytes


class GrpcGuard(Protocol):
    """What a connection needs of :class:`tritonkit.serve.grpc_guard.GrpcGuard`."""

    connections: set[Any]  # the relay's connections (grpc_relay.ClientSide; named there, not here: no cycle)
    draining: bool
    held: str | None
    max_connections: int
    upstream: int
    max_message_bytes: int
    max_connection_bytes: int
    in_flight: int
    refused: int

    def take(self, size: int) -> None: ...
    def give(self, size: int) -> None: ...
    def max_batch(self, model: str, version: str) -> int | None: ...
    def fetch_config(self, key: tuple[str, str], then: Callable[[], None]) -> None: ...


class ConfigMissingError(TritonKitError):
    """The model's config is not cached yet: fetch it, then check again."""

    def __init__(self, key: tuple[str, str]) -> None:
        super().__init__(key)
        self.key = key


class Stream:
    """A call's state on one client connection."""

    __slots__ = (
        "answered", "checked", "cwin", "encoding", "end_in", "end_sent", "head", "id", "message", "need",
        "out", "pending", "reserved", "started", "uwin", "waiting",
    )  # fmt: skip

    def __init__(self, stream_id: int, checked: bool, encoding: bytes, window: int) -> None:
        self.id, self.checked, self.encoding = stream_id, checked, encoding
        self.cwin = self.uwin = window  # the client's window towards the guard; the guard's towards Triton
        self.head = bytearray()  # the 5-byte prefix of the next message, as it comes
        self.message: list[Piece] | None = None  # the message being gathered (prefix first), as read
        self.need = 0  # bytes the message still needs
        self.pending: list[list[Piece]] = []  # whole messages waiting for a model's config
        self.out: list[Piece] = []  # checked bytes waiting for Triton's windows
        self.reserved = 0  # budget this stream holds
        self.end_in = self.end_sent = self.waiting = self.answered = False
        self.started = 0.0


def open_message(head: bytes | bytearray, encoding: bytes, limit: int) -> tuple[int, int]:
    """(compressed flag, length) of a message's prefix; refuses a bad flag or a length past ``limit``."""
    flag, length = _PREFIX.unpack(head)
    if flag > 1:
        raise CallRefusedError(
            INVALID_ARGUMENT, f"a gRPC message's compressed flag is {flag}; expected 0 or 1"
        )
    if flag and encoding not in (b"gzip", b"deflate"):
        named = encoding.decode("latin-1")[:20] or "none"
        raise CallRefusedError(
            INVALID_ARGUMENT, f"a compressed message with grpc-encoding {named}; gzip and deflate are served"
        )
    if length > limit:
        raise CallRefusedError(
            RESOURCE_EXHAUSTED, f"a gRPC message of {length} bytes; at most {limit} are served"
        )
    return flag, length


def inflate(
    data: bytes, encoding: bytes, limit: int, reserve: Callable[[int], None], release: Callable[[int], None]
) -> bytes:
    """The message inflated, at most ``limit`` bytes; each piece reserved as it grows (and released)."""
    decoder = zlib.decompressobj(wbits=31 if encoding == b"gzip" else 15)
    pieces: list[bytes] = []
    held = 0
    piece = b""
    try:
        while True:
            piece = decoder.decompress(data, 1 << 20)
            data = decoder.unconsumed_tail
            held += len(piece)
            if held > limit:
                raise CallRefusedError(
                    RESOURCE_EXHAUSTED, f"a compressed gRPC message inflates past {limit} bytes"
                )
            reserve(len(piece))
            pieces.append(piece)
            if not data or decoder.eof:
                break
        if not decoder.eof:
            raise CallRefusedError(INVALID_ARGUMENT, "a compressed gRPC message that does not inflate whole")
        return b"".join(pieces)
    except zlib.error as exc:
        raise CallRefusedError(
            INVALID_ARGUMENT, f"a compressed gRPC message that does not inflate: {exc}"
        ) from None
    finally:
        release(held if held <= limit else held - len(piece))  # what inflating held
