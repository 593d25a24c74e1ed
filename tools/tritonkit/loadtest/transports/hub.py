"""The gevent side of the gRPC transport: one socket driven by the gevent hub, and gRPC's answers.

Owns, for :mod:`.wire` (HTTP/2 framed by hand): the result type and the transport protocol every
user-facing client relies on (:class:`GrpcResult`, :class:`GrpcTransport`); connecting; the
per-process shared connection; the hub side of the socket (frames queued during one loop turn
leave in one ``send``, a write watcher only while the kernel's buffer is full, one read watcher
that hands received bytes to the subclass's HTTP/2 reader; on close, queued frames leave before
the socket closes); a user greenlet's wait for its stream, with a timeout that gives the stream
up (only a timeout cancels a call: a waiter killed meanwhile leaves its call to be answered, and
:meth:`HubConnection.drain` closes once the calls in flight are answered, because tritonserver 2.51
crashes when a call is cancelled while its answer races the cancel, triton-inference-server/server#7368);
reading a finished stream's gRPC status, message and body (gRPC's ``PROTOCOL-HTTP2.md``: a
5-byte prefix per message, the status in ``grpc-status`` / ``grpc-message`` trailers or in a
trailers-only answer, status names from ``grpc.StatusCode``); and dying with a reason that every
waiting user gets. The subclass owns HTTP/2: opening streams, sending under flow control and the
peer's stream limit, and parsing frames into :meth:`HubConnection._finish` / ``_fail`` / ``_die``.
"""

from __future__ import annotations

import contextlib
import socket
import time
import urllib.parse
from collections import deque
from typing import ClassVar, NamedTuple, Protocol, TypeVar

import grpc
from gevent import Timeout, sleep
from gevent.hub import Waiter, get_hub
from gevent.lock import BoundedSemaphore

from tritonkit.errors import LoadTestError

__all__ = [
    "GrpcResult",
    "GrpcTransport",
    "HubConnection",
    "Stream",
    "status_name",
]

#: gRPC status codes the transport itself produces (the rest come from the server's trailers).
OK, CANCELLED, UNKNOWN, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED = 0, 1, 2, 4, 8
PERMISSION_DENIED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE, UNAUTHENTICATED = 7, 12, 13, 14, 16
#: An HTTP status without gRPC status, as gRPC maps it (``http-grpc-status-mapping.md``).
_HTTP_STATUS = {400: INTERNAL, 401: UNAUTHENTICATED, 403: PERMISSION_DENIED, 404: UNIMPLEMENTED}
_HTTP_STATUS.update(dict.fromkeys((429, 502, 503, 504), UNAVAILABLE))
_STATUS_NAMES: dict[int, str] = {}


def status_name(code: int) -> str:
    """gRPC's name of a status code (``grpc.StatusCode``), e.g. ``DATA_LOSS`` for 15."""
    if not _STATUS_NAMES:
        _STATUS_NAMES.update({c.value[0]: c.name for c in grpc.StatusCode})
    return _STATUS_NAMES.get(code, f"gRPC status {code}")


class GrpcResult(NamedTuple):
    """One finished call: its time, the answer's message (``None`` on failure), status and error."""

    seconds: float
    message: bytes | None
    status: int  # gRPC status code; 0 (OK) exactly when ``message`` is set
    error: str | None  # the server's ``grpc-message``, or the status name when it sent none


class GrpcTransport(Protocol):
    """What a gRPC client needs of a transport: unary calls, health, closing."""

    def infer(self, message: bytes, timeout: float | None = None) -> GrpcResult:
        """Send one serialized ``ModelInferRequest``; wait cooperatively for its result.

        Raises the transport's :class:`LoadTestError` when the connection fails or the timeout
        passes; a call the server never processed (GOAWAY, REFUSED_STREAM) is sent again on a
        fresh connection, not failed.
        """

    def usable(self) -> bool:
        """Whether new calls may use this connection."""

    def close(self) -> None:
        """Close the connection; calls still waiting fail."""


_CONNECTING = BoundedSemaphore()
#: builds a result without NamedTuple's Python-level ``__new__`` (the answer path runs per request)
_result = tuple.__new__
C = TypeVar("C", bound="HubConnection")


class Stream:
    """One call: who waits for it, its header block, what is left to send, what has arrived."""

    __slots__ = ("block", "body", "data", "done", "headers", "id", "start", "waiter", "window")

    def __init__(self, waiter: Waiter[GrpcResult | None], body: bytes, block: bytes) -> None:
        self.waiter = waiter  # gets the result, or None: send the call again on a fresh connection
        self.block = block  # HPACK header block of the request
        self.body = body  # request bytes not sent yet (flow control may hold them back)
        self.id = 0  # 0 while queued behind the peer's SETTINGS_MAX_CONCURRENT_STREAMS
        self.window = 0  # how much more the server lets us send on this stream
        self.data = bytearray()
        self.headers: dict[bytes, bytes] = {}
        self.start = time.perf_counter()
        self.done = False


class HubConnection:
    """One HTTP/2 connection carrying the unary ``ModelInfer`` calls of every user of a process."""

    #: The error this transport raises (a :class:`LoadTestError`); set by each subclass.
    error: ClassVar[type[LoadTestError]]
    _shared: ClassVar[dict[tuple[type[HubConnection], str], HubConnection]] = {}

    @classmethod
    def shared(cls: type[C], url: str) -> C:
        """The process's connection to ``url``, opened again once it died, wore out or drains."""
        connection = HubConnection._shared.get((cls, url))
        if isinstance(connection, cls) and connection.usable():
            return connection
        # One greenlet connects; the others (a GOAWAY wakes many at once) wait for its connection.
        with _CONNECTING:
            connection = HubConnection._shared.get((cls, url))
            if not isinstance(connection, cls) or not connection.usable():
                if isinstance(connection, cls):
                    connection.retire()
                connection = cls(url)
                HubConnection._shared[(cls, url)] = connection
            return connection

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url
        host, _, port = url.rpartition(":")
        try:
            self._sock = socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout)
        except (OSError, ValueError) as exc:
            raise self.error(f"cannot connect to Triton's gRPC endpoint {url}: {exc}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock.setblocking(False)
        self.closed: str | None = None
        self._streams: dict[int, Stream] = {}
        self._pending: deque[Stream] = deque()  # calls not sent yet (the peer's stream limit)
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
        return self.closed is None and not self._retiring

    @classmethod
    def drain_shared(cls, timeout: float) -> bool:
        """:meth:`drain` every shared connection of the process (within ``timeout`` s in all); whether
        every call was answered. A later :meth:`shared` opens a fresh connection."""
        deadline = time.monotonic() + timeout
        drained = True
        for connection in list(HubConnection._shared.values()):
            drained &= connection.drain(max(0.0, deadline - time.monotonic()))
        return drained

    def drain(self, timeout: float) -> bool:
        """Take no new calls, wait (cooperatively, at most ``timeout`` s) until the calls in flight are
        answered, then close; whether they all were. Unlike :meth:`close`, which fails the calls still
        waiting, it abandons no call Triton is answering: tritonserver 2.51 can crash when a connection
        closes under a call in flight, as when a call is cancelled (triton-inference-server/server#7368)."""
        self._retiring = True  # calls made meanwhile go to a fresh connection
        deadline = time.monotonic() + timeout
        while self.closed is None and self._busy() and time.monotonic() < deadline:
            sleep(0.005)
        drained = not self._busy()
        self.close()
        return drained

    def retire(self) -> None:
        """Close once the calls in flight have finished (a worn or drained connection being replaced)."""
        self._retiring = True
        if not self._busy():
            self.close()

    def _busy(self) -> bool:
        return bool(self._streams or self._pending)

    def close(self) -> None:
        raise NotImplementedError

    # --- user side ---------------------------------------------------------------------------
    def _wait(self, stream: Stream, timeout: float | None) -> GrpcResult | None:
        """Wait cooperatively for the stream's answer. After ``timeout`` the call is given up and
        cancelled (the server's ``grpc-timeout`` ends it then too). A waiter that goes away otherwise
        (a stopping user's greenlet killed) cancels nothing: a call not sent yet is dropped, a call
        sent is left open, its answer read and dropped, as a cancelled call whose answer races the
        cancel crashes tritonserver 2.51 (triton-inference-server/server#7368)."""
        self._schedule_flush()
        timer = Timeout(timeout)  # the error is built only when it fires (the usual call needs none)
        timer.start()
        try:
            result: GrpcResult | None = stream.waiter.get()
            return result
        except BaseException as exc:
            if not stream.done and self.closed is None and (exc is timer or stream.id == 0):
                stream.done = True
                with contextlib.suppress(Exception):
                    self._give_up(stream)
                    self._schedule_flush()
            if exc is timer:
                raise self.error(f"no answer from Triton within {timeout} s") from None
            raise
        finally:
            timer.close()

    def _give_up(self, stream: Stream) -> None:
        """Forget a stream nobody waits for any more (and tell the server)."""
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
        if self.closed is None:
            self._flush()
        else:
            self._drain()

    def _drain(self) -> None:
        """A closed connection: send what is still queued (its GOAWAY last), then close the socket."""
        try:
            sent = self._sock.send(self._outgoing) if self._outgoing else 0
        except BlockingIOError:
            sent = 0
        except OSError:
            self._outgoing.clear()
        del self._outgoing[:sent]
        if self._outgoing:
            self._writer.start(self._on_writable)
        else:
            with contextlib.suppress(OSError):
                self._sock.close()

    def _on_readable(self) -> None:
        try:
            data = self._sock.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError as exc:
            self._die(f"the HTTP/2 connection to Triton failed: {exc}", resend_queued=True)
            return
        if not data:
            self._die("Triton closed the HTTP/2 connection", resend_queued=True)
            return
        self._on_data(data)

    def _on_data(self, data: bytes) -> None:
        """Parse received bytes (the subclass's HTTP/2 reader)."""
        raise NotImplementedError

    # --- hub side: answers -------------------------------------------------------------------
    def _forget(self, stream_id: int) -> Stream | None:
        """Drop a stream; a retiring connection closes after its last one (once the hub gets to it)."""
        stream = self._streams.pop(stream_id, None)
        if stream is not None:
            stream.done = True
            if self._pending:
                self._open_pending()
            if self._retiring and not self._busy():
                self._hub.loop.run_callback(self.close)
        return stream

    def _open_pending(self) -> None:
        """A stream closed: room for calls queued behind the peer's stream limit (subclass)."""

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
                problem = "malformed gRPC answer (expected one uncompressed message)"
                stream.waiter.switch(_result(GrpcResult, (seconds, None, INTERNAL, problem)))
            else:
                stream.waiter.switch(_result(GrpcResult, (seconds, bytes(data[5:]), OK, None)))
            return
        message = urllib.parse.unquote(headers.get(b"grpc-message", b"").decode(errors="replace"))
        if not status:
            http_status = headers.get(b":status", b"?").decode(errors="replace")
            code = _HTTP_STATUS.get(int(http_status) if http_status.isdigit() else 0, UNKNOWN)
            message = message or f"no grpc-status in Triton's answer (HTTP status {http_status})"
        else:
            code = int(status) if status.isdigit() else UNKNOWN
            message = message or status_name(code)
        stream.waiter.switch(_result(GrpcResult, (seconds, None, code, message)))

    def _fail(self, stream_id: int, code: int, reason: str) -> None:
        stream = self._forget(stream_id)
        if stream is not None:
            stream.waiter.switch(
                _result(GrpcResult, (time.perf_counter() - stream.start, None, code, reason))
            )

    def _resend(self, streams: list[Stream]) -> None:
        """Calls the server never processed: their users send them again on a fresh connection."""
        for stream in streams:
            stream.done = True

        def wake() -> None:  # from the hub, after the current frame's work
            for stream in streams:
                stream.waiter.switch(None)

        if streams:
            self._hub.loop.run_callback(wake)

    def _queued(self) -> list[Stream]:
        """Take the calls not sent yet (those behind the peer's stream limit)."""
        queued = list(self._pending)
        self._pending.clear()
        return queued

    def _die(self, reason: str, *, linger: bool = False, resend_queued: bool = False) -> None:
        """The connection is unusable: close it and fail every waiting stream with ``reason``.

        ``linger``: frames already queued (a GOAWAY last) still leave before the socket closes.
        ``resend_queued``: calls never sent are sent again on a fresh connection, not failed.
        """
        if self.closed is not None:
            return
        self.closed = reason
        self._reader.stop()
        self._writer.stop()
        streams = list(self._streams.values())
        self._streams = {}
        queued = self._queued()
        if resend_queued:
            self._resend(queued)
        else:
            streams += queued
        for stream in streams:
            stream.done = True
        if linger:
            self._drain()
        else:
            self._outgoing.clear()
            with contextlib.suppress(OSError):
                self._sock.close()
        error = self.error

        def fail() -> None:  # Waiter.throw only from the hub
            for stream in streams:
                stream.waiter.throw(error(reason))

        if streams:
            self._hub.loop.run_callback(fail)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._sock.close()
