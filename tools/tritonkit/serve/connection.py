"""One client connection of the HTTP guard (:mod:`tritonkit.serve.guard`) and its link to Triton.

:class:`Connection` parses with llhttp (``httptools``), checks each request (:mod:`tritonkit.serve.kserve`),
writes it anew for Triton and forwards one at a time, in order; :class:`_Upstream` relays each answer as it
arrives and answers 503 for a request whose Triton connection closed before its answer. The limits are
the guard module's docstring's.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
from collections import deque
from dataclasses import dataclass
from typing import Protocol, cast

import httptools

from tritonkit.serve.kserve import RefusedError, Route, check_body, inflate, is_readiness, resolve
from tritonkit.serve.options import ADMIN_HEADER

__all__ = ["Connection", "trim_heap"]

_TARGET_LIMIT = 4096
_HEAD_LIMIT = 8192
_MAX_HEADERS = 100
#: Seconds a message may go without a byte arriving.
_IDLE_S = 5.0
#: Infer bodies larger than this are checked on a worker thread, not on the event loop.
_INLINE_CHECK_BYTES = 256 * 1024
_REASONS = {
    400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
    411: "Length Required", 413: "Content Too Large", 414: "URI Too Long", 415: "Unsupported Media Type",
    431: "Request Header Fields Too Large", 503: "Service Unavailable", 505: "HTTP Version Not Supported",
}  # fmt: skip
#: The HTTP versions the guard serves (llhttp also reads 0.9 and 2.0 in HTTP/1 framing).
_VERSIONS = ("1.1", "1.0")
#: Headers the guard consumes or rewrites; never forwarded as the client sent them.
_HOP = frozenset(
    {
        *(b"host", b"content-length", b"transfer-encoding", b"connection", b"keep-alive"),
        *(b"proxy-connection", b"te", b"trailer", b"upgrade", b"expect", b"content-encoding"),
    }
)
#: Headers Triton reads by their first occurrence: a second one could differ from what was checked.
_SINGLE = frozenset(
    {
        *(b"host", b"content-encoding", b"inference-header-content-length", b"content-type", b"expect"),
        ADMIN_HEADER.encode(),
    }
)
_CLOSE = b"Connection: close\r\n"


def _answer(status: int, message: str, *, close: bool, retry: bool = False) -> bytes:
    body = json.dumps({"error": message}).encode()
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{'Retry-After: 1' + chr(13) + chr(10) if retry else ''}"
        f"{'Connection: close' if close else 'Connection: keep-alive'}\r\n\r\n"
    )
    return head.encode() + body


def _malformed(error: str, limit: int) -> RefusedError:
    """The answer to a request llhttp could not parse (``error``: its reason)."""
    if "Content-Length overflow" in error:  # more digits than 64 bits hold
        return RefusedError(413, f"the declared body is over the limit of {limit} bytes")
    status = 505 if "HTTP version" in error or "PRI" in error else 400  # PRI: HTTP/2's preface
    return RefusedError(status, f"malformed HTTP/1.1 request: {error}")


def _unchecked(exc: BaseException) -> str:
    return f"the request could not be checked ({type(exc).__name__}: {str(exc)[:80]})"


def trim_heap() -> None:
    """Give freed body buffers back to the system (glibc keeps them in its heap otherwise)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


@dataclass(slots=True)
class _Item:
    """A request ready to forward (``data``), or an answer the guard gives itself (``answer``)."""

    data: bytes = b""
    answer: bytes = b""
    close: bool = False
    held: int = 0  # body bytes counted against the in-flight budget until the answer is complete


class Guard(Protocol):
    """What a connection reads and updates of the guard that accepted it (``tritonkit.serve.guard.Guard``)."""

    _loop: asyncio.AbstractEventLoop
    connections: set[Connection]
    max_connections: int
    upstream: int
    max_body_bytes: int
    head_timeout: float
    request_timeout: float
    draining: bool
    held: str | None
    refused: int
    in_flight: int

    def unready(self, model: str | None) -> str | None: ...

    def take(self, size: int) -> None: ...

    def give(self, size: int) -> None: ...


class Connection(asyncio.Protocol):
    """One client connection: parse, check, rewrite, forward one request at a time, relay the answer."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self.loop = guard._loop
        self.transport: asyncio.Transport | None = None
        self.parser: httptools.HttpRequestParser | None = httptools.HttpRequestParser(self)
        self.queue: deque[_Item] = deque()
        self.busy: _Item | None = None
        self.upstream: _Upstream | None = None
        self.connecting = False
        self.closing = False
        self.paused = False
        self.eof = False
        self.timer: asyncio.TimerHandle | None = None
        self.started = self.last_byte = 0.0
        self._reset()

    def _reset(self) -> None:
        self.in_message = False
        self.url = b""
        self.header_count = 0
        #: The header lines Triton gets, written as they arrive (hop-by-hop ones left out).
        self.forward: list[bytes] = []
        self.fields: dict[bytes, bytes] = {}
        self.head_size = 0
        self.body: list[bytes] = []
        self.body_size = 0
        self.route: Route | None = None
        self.model: str | None = None
        self.target = b""
        self.line_tail = b""  # the last bytes of a head still arriving

    # --- transport events ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport subclasses
        self.guard.connections.add(self)
        if len(self.guard.connections) > self.guard.max_connections or self.guard.draining:
            reason = "the server is stopping" if self.guard.draining else "too many connections"
            self._refuse(RefusedError(503, f"{reason}; retry later", count=False))

    def connection_lost(self, exc: Exception | None) -> None:
        self.guard.connections.discard(self)
        self.closing = True
        self._cancel_timer()
        if self.body_size:
            self.guard.give(self.body_size)
            self.body_size = 0
        for item in (*self.queue, *([self.busy] if self.busy else [])):
            self._give(item)
        if self.busy is not None:
            self.guard.in_flight -= 1
            self.busy = None
        self.queue.clear()
        self.drop_upstream()

    def data_received(self, data: bytes) -> None:
        if self.parser is None:  # refused: the rest is read and thrown away
            return
        self.last_byte = self.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            self._refuse(
                cause if isinstance(cause, RefusedError) else RefusedError(400, _unchecked(cause or exc))
            )
        except httptools.HttpParserUpgrade:
            self._upgrade()
        except httptools.HttpParserError as exc:
            self._refuse(_malformed(str(exc), self.guard.max_body_bytes))
        else:
            if self.in_message and self.route is None:  # a head cut across reads (rare)
                self._request_line(data)
        if self.in_message and self.timer is None and not self.closing:
            self._arm()
        self._pump()
        if len(self.queue) >= 8 and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def _request_line(self, data: bytes) -> None:
        """Refuse an HTTP/0.9 request line (``GET /path`` and CRLF, no version) as soon as it ends: llhttp
        reads one as the start of a head and would wait for its headers (then serve it) until the deadline."""
        assert self.parser is not None
        keep = _TARGET_LIMIT + 32
        recent = data[-keep:] if len(data) >= keep else self.line_tail[len(data) - keep :] + data
        self.line_tail = recent
        if not self.url or not recent.endswith(b"\n"):
            return
        line = b"%s %s" % (self.parser.get_method(), self.url)
        for end in (b"\r\n", b"\n"):
            # The line ends the stream, not as a header's value ("X: GET /path" has a colon or blank before).
            if recent.endswith(line + end) and recent[-len(line + end) - 1 :][:1] not in b" \t:":
                self._refuse(RefusedError(505, "HTTP/0.9 is not served; expected HTTP/1.1 or HTTP/1.0"))
                return

    def _upgrade(self) -> None:
        """llhttp stops at a request asking to switch protocols (``Upgrade``, ``CONNECT``, ``PRI``). A
        complete one is served as plain HTTP/1.1 (RFC 9110 lets a server ignore ``Upgrade``; the guard
        drops the header) and is the connection's last; one cut short is refused."""
        if self.in_message or not (self.queue or self.busy):
            self._refuse(RefusedError(400, "protocol upgrades are not served"))
            return
        self.parser = None  # the bytes after it belong to the other protocol: read no further
        (self.queue[-1] if self.queue else cast(_Item, self.busy)).close = True

    def eof_received(self) -> bool:
        """The client sent all it will: answer what it sent (a half request is refused), then close."""
        self.eof = True
        if self.in_message and self.parser is not None:
            self._refuse(RefusedError(400, "the request ended before its body did"))
        self._pump()
        return True

    def pause_writing(self) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.resume_reading()

    # --- timers --------------------------------------------------------------------------------
    def _arm(self) -> None:
        limit = self.started + (self.guard.request_timeout if self.route else self.guard.head_timeout)
        self.timer = self.loop.call_at(min(limit, self.last_byte + _IDLE_S), self._expire)

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expire(self) -> None:
        self.timer = None
        if not self.in_message or self.closing:
            return
        now = self.loop.time()
        if self.route is None and now >= self.started + self.guard.head_timeout:
            self._refuse(
                RefusedError(408, f"the request head did not arrive within {self.guard.head_timeout:g} s")
            )
        elif now >= self.started + self.guard.request_timeout:
            self._refuse(
                RefusedError(408, f"the request did not arrive within {self.guard.request_timeout:g} s")
            )
        elif now >= self.last_byte + _IDLE_S:
            self._refuse(RefusedError(408, f"no byte of the request arrived for {_IDLE_S:g} s"))
        else:
            self._arm()
        self._pump()

    # --- parser callbacks ----------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._reset()
        self.in_message = True
        self.started = self.last_byte

    def on_url(self, url: bytes) -> None:
        self.url += url
        if len(self.url) > _TARGET_LIMIT:
            raise RefusedError(414, f"the request target is over {_TARGET_LIMIT} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_size += len(name) + len(value) + 4
        self.header_count += 1
        if self.head_size > _HEAD_LIMIT or self.header_count > _MAX_HEADERS:
            raise RefusedError(431, f"the request head is over {_HEAD_LIMIT} bytes or {_MAX_HEADERS} fields")
        lower = name.lower()
        fields = self.fields
        if lower in fields and lower in _SINGLE:
            raise RefusedError(400, f"header {name.decode('latin-1')} is given twice")
        fields[lower] = value
        if lower not in _HOP:
            self.forward.append(b"%s: %s\r\n" % (name, value))

    def on_headers_complete(self) -> None:
        assert self.parser is not None
        method = self.parser.get_method().decode("latin-1")
        version = self.parser.get_http_version()
        if version not in _VERSIONS:
            raise RefusedError(505, f"HTTP/{version} is not served; expected HTTP/1.1 or HTTP/1.0")
        if version == "1.1" and b"host" not in self.fields:
            raise RefusedError(400, "an HTTP/1.1 request needs a Host header")
        if b"transfer-encoding" in self.fields:
            raise RefusedError(411, "chunked bodies are not accepted; send Content-Length")
        if self.url[:1] == b"/" and b"#" not in self.url:  # origin-form: no URL parser needed
            path, _, query = self.url.partition(b"?")
            self.target = self.url
        else:
            path, query = self._absolute()
            self.target = path + (b"?" + query if query else b"")
        self.route, self.model = resolve(method, path.decode("latin-1"))
        length = int(self.fields.get(b"content-length", b"0"))
        if length > self.guard.max_body_bytes:
            raise RefusedError(
                413, f"the body of {length} bytes is over the limit of {self.guard.max_body_bytes}"
            )
        encoding = self.fields.get(b"content-encoding", b"identity")
        if encoding not in (b"identity", b"gzip", b"deflate", b""):
            raise RefusedError(
                415, f"Content-Encoding {encoding[:20]!r} is not served; expected gzip or deflate"
            )
        if self.fields.get(b"expect", b"").lower() == b"100-continue" and length and not self.busy:
            assert self.transport is not None
            if not self.queue:  # an interim answer must not cut into another's
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _absolute(self) -> tuple[bytes, bytes]:
        """Path and query of an absolute-form target (``http://host:port/path?query``)."""
        try:
            url = httptools.parse_url(self.url)
        except httptools.HttpParserInvalidURLError:
            raise RefusedError(400, "the request target is not a URL") from None
        if url.schema not in (b"http", b"https") or url.fragment is not None or url.userinfo is not None:
            raise RefusedError(400, "the request target must be a path or an http URL without a fragment")
        return url.path or b"/", url.query or b""

    def on_body(self, chunk: bytes) -> None:
        self.guard.take(len(chunk))
        self.body_size += len(chunk)
        self.body.append(chunk)

    def on_message_complete(self) -> None:
        assert self.parser is not None and self.route is not None
        self.in_message = False
        self._cancel_timer()
        close = not self.parser.should_keep_alive() or self.guard.draining
        body = b"".join(self.body) if len(self.body) != 1 else self.body[0]
        # From here the request's item holds its share of the budget, whatever it grows to while it
        # inflates; every way out (refused, queued, answered, the connection lost) gives back item.held.
        item = _Item(close=close, held=self.body_size)
        self.body, self.body_size = [], 0
        try:
            self._complete(item, body)
        except BaseException:
            self._give(item)
            raise

    def _give(self, item: _Item) -> None:
        """Give back what ``item`` holds of the in-flight budget (once: it then holds nothing)."""
        held, item.held = item.held, 0
        if held:
            self.guard.give(held)

    def _complete(self, item: _Item, body: bytes) -> None:
        assert self.route is not None
        guard = self.guard
        reason = guard.held or ("the server is stopping" if guard.draining else None)
        if reason is None and is_readiness(self.route):
            reason = guard.unready(self.model)
        if reason is not None:
            self._give(item)
            item.answer = _answer(503, reason, close=item.close, retry=True)
            self.queue.append(item)
            return
        encoding = self.fields.get(b"content-encoding", b"identity")
        if encoding in (b"gzip", b"deflate"):
            compressed = item.held

            def reserve(size: int) -> None:  # each inflated piece is held before it is kept
                guard.take(size)
                item.held += size

            body = inflate(body, encoding.decode(), guard.max_body_bytes, reserve)
            guard.give(compressed)  # the compressed bytes are let go: the item holds the inflated size
            item.held -= compressed
        header_length = self.fields.get(b"inference-header-content-length")
        head = self._head(len(body))
        if len(body) > _INLINE_CHECK_BYTES and self.route.body == "infer":
            self.queue.append(item)  # data comes with the worker thread's check
            self.loop.create_task(self._check_later(item, self.route, body, header_length, head))
            return
        check_body(self.route, body, header_length, guard.max_body_bytes)
        item.data = head + body
        self.queue.append(item)

    def _head(self, length: int) -> bytes:
        assert self.parser is not None
        start = b"%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n" % (self.parser.get_method(), self.target)
        return b"".join((start, *self.forward, b"Content-Length: %d\r\n\r\n" % length))

    async def _check_later(
        self, item: _Item, route: Route, body: bytes, header_length: bytes | None, head: bytes
    ) -> None:
        try:
            await asyncio.to_thread(check_body, route, body, header_length, self.guard.max_body_bytes)
            item.data = head + body
        except Exception as exc:  # any failure must answer: an item left without data stalls the queue
            refused = exc if isinstance(exc, RefusedError) else RefusedError(400, _unchecked(exc))
            self.guard.refused += refused.count
            self._give(item)
            item.close = True
            item.answer = _answer(refused.status, str(refused), close=True)
            del refused  # this frame holding its exception is a cycle: the body would wait for the gc
            self.parser = None
        self._pump()

    # --- answering -----------------------------------------------------------------------------
    def _refuse(self, refused: RefusedError) -> None:
        """Answer ``refused`` after what is queued, then close; read no further request."""
        self.guard.refused += refused.count
        self._cancel_timer()
        if self.body_size:
            self.guard.give(self.body_size)
            self.body_size, self.body = 0, []
        self.parser = None
        self.in_message = False
        self.queue.append(_Item(answer=_answer(refused.status, str(refused), close=True), close=True))

    def _pump(self) -> None:
        """Send what is next in the queue, one request at a time, in order."""
        transport = self.transport
        while self.busy is None and self.queue and not self.closing and transport is not None:
            item = self.queue[0]
            if item.answer:
                self.queue.popleft()
                transport.write(item.answer)
                if item.close:
                    self._finish()
                    return
                continue
            if not item.data:  # still being checked on a worker thread
                return
            self.queue.popleft()
            self.busy = item
            self.guard.in_flight += 1
            if self.upstream is not None and self.upstream.transport is not None:
                self.upstream.send(item.data)
            elif not self.connecting:
                self.connecting = True
                self.loop.create_task(self._connect())
        if self.busy is None and not self.queue and self.eof and not self.closing:
            self._finish()
        elif self.paused and not self.queue and transport is not None and not self.closing:
            self.paused = False
            transport.resume_reading()

    async def _connect(self) -> None:
        try:
            _, upstream = await self.loop.create_connection(
                lambda: _Upstream(self), "127.0.0.1", self.guard.upstream
            )
        except OSError:
            self.connecting = False
            self.answered(_answer(503, "the server is not running; retry later", close=False, retry=True))
            return
        self.connecting = False
        if self.closing:
            upstream.close()
            return
        self.upstream = upstream
        if self.busy is not None:
            upstream.send(self.busy.data)

    def answered(self, answer: bytes = b"", *, keep: bool = True) -> None:
        """The forwarded request is done (its answer relayed, or ``answer`` sent in its place)."""
        item, self.busy = self.busy, None
        if item is None:
            return
        self.guard.in_flight -= 1
        self._give(item)
        if answer and self.transport is not None and not self.closing:
            self.transport.write(answer)
        if item.close or not keep or self.guard.draining:
            self._finish()
        else:
            self._pump()

    def _finish(self) -> None:
        """Close after what was written: half-close, then let the client read its answer (1 s at most)."""
        self.closing = True
        self.parser = None
        for item in self.queue:
            self._give(item)
        self.queue.clear()
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if transport.can_write_eof():
            transport.write_eof()
        transport.resume_reading()  # read and discard what the client still sends (no reset)
        self.loop.call_later(1.0, transport.close)
        self.drop_upstream()

    def close_if_idle(self) -> None:
        if self.busy is None and not self.queue and not self.in_message and self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def drop_upstream(self) -> None:
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            upstream.orphaned = True
            if upstream.transport is not None:
                upstream.transport.close()


class _Upstream(asyncio.Protocol):
    """The connection to Triton of one client connection: relays each answer as it arrives."""

    __slots__ = ("client", "done", "keep", "orphaned", "parser", "started", "transport")

    def __init__(self, client: Connection) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.started = False  # bytes of the current answer went to the client
        self.done = False
        self.keep = True
        self.orphaned = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def send(self, data: bytes) -> None:
        assert self.transport is not None
        self.started = self.done = False
        self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        client = self.client
        if self.orphaned or client.transport is None or client.closing:
            return
        last = client.guard.draining or (client.busy is not None and client.busy.close)
        if not self.started and last and b"\r\n" in data:
            at = data.index(b"\r\n") + 2  # this answer is the connection's last: say so
            data = data[:at] + _CLOSE + data[at:]
        self.started = True
        client.transport.write(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:  # Triton's answer did not parse: end both connections
            self.orphaned = True
            client.closing = True
            client.transport.close()
            return
        if self.done:
            self.done = False
            self.started = False
            client.answered(keep=self.keep)

    def on_message_complete(self) -> None:
        self.done = True
        self.keep = self.parser.should_keep_alive()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.orphaned:
            return
        client = self.client
        client.upstream = None
        if client.busy is None:
            return
        if self.started:  # half an answer went out: the client must see the connection end
            client.busy.close = True
            client.answered()
        else:
            client.answered(
                _answer(
                    503, "the server closed the connection before answering; retry", close=False, retry=True
                )
            )
