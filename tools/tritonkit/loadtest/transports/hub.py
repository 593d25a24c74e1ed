"""What the two in-process gRPC transports share: one socket driven by the gevent hub, and gRPC's answers.

Owns, for :mod:`.grpc_wire` (HTTP/2 framed by hand) and :mod:`.grpc_h2` (the ``h2`` state machine):
connecting; the per-process shared connection; the hub side of the socket (request frames queued
during one loop turn leave in one ``send``, a write watcher only while the kernel's buffer is
full, one read watcher that hands received bytes to the subclass's HTTP/2 reader); a user
greenlet's wait for its stream, with a timeout that cancels the stream; reading a finished
stream's gRPC status, message and body (``PROTOCOL-HTTP2.md``: a 5-byte prefix per message, the
status in ``grpc-status`` / ``grpc-message`` trailers or in a trailers-only answer); and dying with
a reason that every waiting user gets. Subclasses own HTTP/2: opening streams, sending bodies under
flow control, and parsing frames into :meth:`HubConnection._finish` / ``_fail`` / ``_die`` calls.
"""

from __future__ import annotations

import contextlib
import socket
import time
import urllib.parse
from typing import Any, ClassVar, TypeVar

from gevent.hub import Waiter, get_hub

from tritonkit.errors import LoadTestError

__all__ = ["PATH", "GrpcResult", "HubConnection", "Stream", "parse_answer"]

#: The unary RPC both transports call.
PATH = "/inference.GRPCInferenceService/ModelInfer"
_STATUS_NAMES = {
    1: "CANCELLED",
    2: "UNKNOWN",
    3: "INVALID_ARGUMENT",
    4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND",
    8: "RESOURCE_EXHAUSTED",
    12: "UNIMPLEMENTED",
    13: "INTERNAL",
    14: "UNAVAILABLE",
}

#: (seconds, response message bytes or None, error text or None)
GrpcResult = tuple[float, bytes | None, str | None]

C = TypeVar("C", bound="HubConnection")


class Stream:
    """One request in flight: who waits for it, what is left to send, what has arrived."""

    __slots__ = ("body", "data", "headers", "start", "waiter", "window")

    def __init__(self, waiter: Waiter[GrpcResult], body: bytes, window: int = 0) -> None:
        self.waiter = waiter
        self.body = body  # request bytes not sent yet (flow control may hold them back)
        self.window = window  # how much more the server lets us send on this stream (grpc_wire)
        self.data = bytearray()
        self.headers: dict[bytes, bytes] = {}
        self.start = time.perf_counter()


def grpc_body(message: bytes) -> bytes:
    """A gRPC message as one uncompressed length-prefixed frame."""
    return b"\x00" + len(message).to_bytes(4, "big") + message


class HubConnection:
    """One HTTP/2 connection carrying the unary ``ModelInfer`` calls of every user of a process."""

    #: The error this transport raises (a :class:`LoadTestError`); set by each subclass.
    error: ClassVar[type[LoadTestError]]
    _shared: ClassVar[dict[tuple[type[HubConnection], str], HubConnection]] = {}

    @classmethod
    def shared(cls: type[C], url: str) -> C:
        """The process's connection to ``url``, opened again once it died or wore out."""
        connection = HubConnection._shared.get((cls, url))
        if not isinstance(connection, cls) or not connection.usable():
            if isinstance(connection, cls):
                connection.retire()
            connection = cls(url)
            HubConnection._shared[(cls, url)] = connection
        return connection

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        host, _, port = url.rpartition(":")
        try:
            self._sock = socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout)
        except (OSError, ValueError) as exc:
            raise self.error(f"cannot connect to Triton's gRPC endpoint {url}: {exc}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.setblocking(False)
        self.closed: str | None = None
        self._streams: dict[int, Stream] = {}
        self._outgoing = bytearray()
        self._flush_scheduled = False
        self._retiring = False
        self._hub = get_hub()
        self._reader = self._hub.loop.io(self._sock.fileno(), 1)
        self._writer = self._hub.loop.io(self._sock.fileno(), 2)

    def _start(self) -> None:
        """Watch the socket and send what the subclass queued; the end of a subclass's ``__init__``."""
        self._reader.start(self._on_readable)
        self._schedule_flush()

    def usable(self) -> bool:
        """Whether new requests may use this connection (subclasses add their limits)."""
        return self.closed is None

    def retire(self) -> None:
        """Close once the streams in flight have finished (a worn connection being replaced)."""
        self._retiring = True
        if not self._streams:
            self.close()

    def close(self) -> None:
        raise NotImplementedError

    # --- user side ---------------------------------------------------------------------------
    def _wait(self, stream_id: int, waiter: Waiter[GrpcResult], timeout: float | None) -> GrpcResult:
        """Wait cooperatively for the stream's answer; a stream given up on is cancelled on the server."""
        import gevent

        self._schedule_flush()
        try:
            with gevent.Timeout(timeout, self.error(f"no answer from Triton within {timeout} s")):
                result: GrpcResult = waiter.get()
                return result
        finally:
            if self._forget(stream_id) is not None and self.closed is None:
                with contextlib.suppress(Exception):  # given up (timeout, user stopped)
                    self._cancel(stream_id)
                    self._schedule_flush()

    def _cancel(self, stream_id: int) -> None:
        raise NotImplementedError

    # --- hub side: the socket ------------------------------------------------------------------
    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._hub.loop.run_callback(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self.closed is not None or not self._outgoing:
            return
        try:
            sent = self._sock.send(self._outgoing)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            self._die(f"the HTTP/2 connection to Triton failed: {exc}")
            return
        del self._outgoing[:sent]
        if self._outgoing and not self._writer.active:
            self._writer.start(self._on_writable)

    def _on_writable(self) -> None:
        self._writer.stop()
        self._flush()

    def _on_readable(self) -> None:
        try:
            data = self._sock.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError as exc:
            self._die(f"the HTTP/2 connection to Triton failed: {exc}")
            return
        if not data:
            self._die("Triton closed the HTTP/2 connection")
            return
        self._on_data(data)

    def _on_data(self, data: bytes) -> None:
        """Parse received bytes (the subclass's HTTP/2 reader)."""
        raise NotImplementedError

    # --- hub side: answers -------------------------------------------------------------------
    def _forget(self, stream_id: int) -> Stream | None:
        """Drop a stream; a retiring connection closes after its last one (once the hub gets to it)."""
        stream = self._streams.pop(stream_id, None)
        if stream is not None and self._retiring and not self._streams:
            self._hub.loop.run_callback(self.close)
        return stream

    def _finish(self, stream_id: int) -> None:
        """The stream ended: wake its user with the answer or Triton's error."""
        stream = self._forget(stream_id)
        if stream is None:
            return
        seconds = time.perf_counter() - stream.start
        headers = stream.headers
        status = headers.get(b"grpc-status")
        if status == b"0":
            data = stream.data
            if len(data) < 5 or data[0] != 0 or int.from_bytes(data[1:5], "big") != len(data) - 5:
                stream.waiter.switch(
                    (seconds, None, "malformed gRPC answer (expected one uncompressed message)")
                )
            else:
                stream.waiter.switch((seconds, bytes(data[5:]), None))
            return
        message = urllib.parse.unquote(headers.get(b"grpc-message", b"").decode(errors="replace"))
        if not status:
            http_status = headers.get(b":status", b"?").decode()
            message = message or f"no grpc-status in Triton's answer (HTTP status {http_status})"
        else:
            code = int(status) if status.isdigit() else -1
            message = message or _STATUS_NAMES.get(code, f"gRPC status {status.decode(errors='replace')}")
        stream.waiter.switch((seconds, None, message))

    def _fail(self, stream_id: int, reason: str) -> None:
        stream = self._forget(stream_id)
        if stream is not None:
            stream.waiter.switch((time.perf_counter() - stream.start, None, reason))

    def _die(self, reason: str) -> None:
        """The connection is unusable: close it and fail every waiting stream with ``reason``."""
        if self.closed is not None:
            return
        self.closed = reason
        self._reader.stop()
        self._writer.stop()
        with contextlib.suppress(OSError):
            self._sock.close()
        streams, self._streams = self._streams, {}
        error = self.error

        def fail() -> None:  # Waiter.throw only from the hub
            for stream in streams.values():
                stream.waiter.throw(error(reason))

        self._hub.loop.run_callback(fail)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._sock.close()


def parse_answer(message: bytes) -> Any:
    """The ``ModelInferResponse`` in an answer's bytes."""
    from tritonclient.grpc import service_pb2

    return service_pb2.ModelInferResponse.FromString(message)
