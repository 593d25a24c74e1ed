"""An HTTP guard in front of Triton's HTTP port: limits Triton 2.51 lacks, a real drain, true readiness.

Triton 2.51 has no option bounding an HTTP body and its own parsers die on hostile bodies (a declared
shape of terabytes: ``std::bad_alloc``; JSON nested 130,000 levels: SIGSEGV). On SIGTERM it keeps
serving new requests on open keep-alive connections, and it answers ready while a model's python stub
is dead or stopped. The guard owns the client connections:

* requests are parsed by llhttp (``httptools``), which refuses what RFC 9112 says to refuse: whitespace
  before a header's colon, obs-fold, duplicate or conflicting ``Content-Length``, ``Transfer-Encoding``
  with ``Content-Length``, bare LF line ends. ``Host`` must be given once (HTTP/1.1). Versions other
  than 1.0 and 1.1 get 505, an HTTP/0.9 request line (no version) as soon as it ends;
* default deny: only the routes of :mod:`tritonkit.serve.kserve` pass, each with its method and body
  check; an absolute-form target is reduced to its path. Triton never sees the client's bytes: the guard
  writes each request anew (origin-form target, ``Content-Length`` of the checked body, hop-by-hop
  headers dropped), so nothing the guard did not read can reach Triton;
* limits: a request target ≤ 4 KiB (414) and a head ≤ 8 KiB (431; Triton closes the connection on URIs
  of about 8 KiB), a body ≤ ``max_body_bytes`` (413) inflated or not, bodies buffered across all
  connections ≤ ``max_inflight_bytes`` (503), a head within ``head_timeout`` and a whole request within
  ``request_timeout`` of its first byte, and no gap over ``_IDLE_S`` between bytes of a message (408);
* ``/v2/health/ready`` and ``/v2/models/<m>[/versions/<v>]/ready`` answer 503 while ``unready(model)``
  gives a reason (a dead or unresponsive stub), while :meth:`Guard.hold` is in force (a restart) and
  while draining; held, every request is answered 503 and the connection kept;
* :meth:`Guard.drain` stops accepting, closes idle connections, answers new requests 503 with
  ``Connection: close`` and lets the forwarded ones finish; a request whose Triton connection closes
  before its answer (a restart) is answered 503, not dropped.

Each client connection gets its own keep-alive connection to Triton (loopback). gRPC is not guarded.
The guard's event loop is uvloop's where uvloop is installed (a tenth less CPU per request than
asyncio's own loop, docs/reliability.md), else asyncio's.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import resource
import threading
from collections.abc import Callable
from typing import cast

from tritonkit.errors import PortInUseError
from tritonkit.serve.connection import Connection, trim_heap
from tritonkit.serve.kserve import RefusedError

__all__ = ["Guard", "RefusedError"]

#: Body bytes given back since the last trim that start one; how long after the trim runs.
_TRIM_BYTES = 32 << 20
_TRIM_DELAY_S = 0.25


def call_on_loop(
    loop: asyncio.AbstractEventLoop, thread: threading.Thread, function: Callable[[], object]
) -> None:
    """Run ``function`` on a guard's ``loop`` (its own ``thread``) and wait up to 5 s for it; nothing when
    the thread has ended."""
    if thread.is_alive():
        done = threading.Event()

        def run() -> None:
            function()
            done.set()

        loop.call_soon_threadsafe(run)
        done.wait(5)


def bind_error(role: str, host: str, port: int, exc: OSError) -> PortInUseError:
    """The one line for a guard's listener that could not bind (the gRPC guard's too)."""
    return PortInUseError(
        f"{role} port {port} could not be bound on {host}: {exc.strerror or exc}; expected a free port of "
        "this host (another process may have taken it since the start was checked)"
    )


def _event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop where uvloop is installed, else asyncio's."""
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        return asyncio.new_event_loop()
    return cast(asyncio.AbstractEventLoop, uvloop.new_event_loop())


class Guard:
    """Listen on ``host:port`` and forward to Triton's HTTP endpoint at ``127.0.0.1:upstream``."""

    def __init__(
        self,
        host: str,
        port: int,
        upstream: int,
        *,
        max_body_bytes: int,
        max_inflight_bytes: int | None = None,
        unready: Callable[[str | None], str | None] = lambda model: None,
        head_timeout: float = 10.0,
        request_timeout: float = 60.0,
        max_connections: int = 16384,
    ) -> None:
        self.host, self.port, self.upstream = host, port, upstream
        self.max_body_bytes = max_body_bytes
        self.max_inflight_bytes = max_inflight_bytes or 4 * max_body_bytes
        self.unready = unready
        self.head_timeout, self.request_timeout = head_timeout, request_timeout
        self.max_connections = max_connections
        self.refused = 0  # requests refused by a limit
        self.buffered = 0  # body bytes held across connections
        self._peak = 0  # the most held since the heap was last trimmed
        self._trimming = False
        self.held: str | None = None  # while set, every request is answered 503 with this reason
        self.draining = False
        self.in_flight = 0
        self.connections: set[Connection] = set()
        self._loop = _event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="tritonkit-guard", daemon=True)

    # --- life cycle (called from other threads) ------------------------------------------------
    def start(self) -> None:
        # One descriptor per client connection and one per forwarded one: thousands of idle
        # clients must not exhaust a low soft limit (asyncio backs off accepting when they do).
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < hard:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(timeout=10)
        except OSError as exc:  # taken since serve checked it, or not an address of this host
            self.close()
            raise bind_error("http", self.host, self.port, exc) from None

    async def _listen(self) -> None:
        self._server = await self._loop.create_server(
            lambda: Connection(self), self.host, self.port, reuse_address=True, backlog=1024
        )

    def _call(self, function: Callable[[], object]) -> None:
        call_on_loop(self._loop, self._thread, function)

    def hold(self, reason: str) -> None:
        """Answer every new request 503 (``reason``, ``Retry-After: 1``) until :meth:`release`."""

        def apply() -> None:
            self.held = reason

        self._call(apply)

    def release(self, upstream: int) -> None:
        """Serve again, now from Triton at ``127.0.0.1:upstream`` (connections to the old one dropped)."""

        def apply() -> None:
            self.upstream, self.held = upstream, None
            for connection in self.connections:
                if connection.busy is None:  # a busy one's link to the old server has ended already
                    connection.drop_upstream()

        self._call(apply)

    def drain(self, timeout: float) -> int:
        """Stop accepting, close idle connections, wait for forwarded requests; returns those left."""
        if not self._thread.is_alive():
            return 0
        future = asyncio.run_coroutine_threadsafe(self._drain(timeout), self._loop)
        return future.result(timeout=timeout + 5)

    async def _drain(self, timeout: float) -> int:
        self.draining = True
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.close_if_idle()
        deadline = self._loop.time() + timeout
        while self.in_flight and self._loop.time() < deadline:
            await asyncio.sleep(0.02)
        return self.in_flight

    def close(self) -> None:
        """Close the listening socket and every connection, and end the guard's thread."""
        if self._thread.is_alive():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(timeout=5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        with contextlib.suppress(RuntimeError):
            self._loop.close()

    async def _close(self) -> None:
        self.draining = True
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.abort()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)  # none left pending when the loop stops

    # --- the in-flight body budget (event-loop thread only) --------------------------------------
    def take(self, size: int) -> None:
        if self.buffered + size > self.max_inflight_bytes:
            raise RefusedError(
                503, f"request bodies in flight hold over {self.max_inflight_bytes} bytes; retry later"
            )
        self.buffered += size
        self._peak = max(self._peak, self.buffered)

    def give(self, size: int) -> None:
        self.buffered -= size
        if self._peak - self.buffered > _TRIM_BYTES and not self._trimming:
            # Trimmed a moment later: the caller (a check's frame, an answer being written) may still
            # hold the body that was just given back; freed then, glibc keeps its pages without a trim.
            self._trimming = True
            self._loop.call_later(_TRIM_DELAY_S, self._trim)

    def _trim(self) -> None:
        self._trimming = False
        self._peak = self.buffered
        trim_heap()
