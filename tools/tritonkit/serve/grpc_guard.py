"""A guard in front of Triton's gRPC port: message caps, memory budgets and request checks Triton 2.51 lacks.

Triton 2.51's gRPC endpoint reads a message as large as its 5-byte prefix declares (2^32-1 bytes: it
took 768 MB in 5 s), inflates a compressed one before any limit (1 GiB from 1 MB of gzip: 2.6 GB of
RSS), and trusts declared shapes (three single requests kill a model's python stub, a declared batch
of 2^32+1 over one row is served as that row). The guard listens on the public gRPC port and relays
HTTP/2 to Triton's gRPC port on loopback, one Triton connection per client connection
(:mod:`.grpc_relay`, :mod:`.grpc_upstream`):

* a message whose prefix declares more than ``max_message_bytes`` is refused (RESOURCE_EXHAUSTED)
  before its bytes are read; the declared bytes are reserved against the connection's budget
  (``max_connection_bytes``) and the guard's (``max_inflight_bytes``) when the prefix comes, and a
  reservation past either is refused (RESOURCE_EXHAUSTED); a compressed message (gzip, deflate) is
  inflated within the cap, each piece reserved as it grows, and sent on compressed;
* each ``ModelInfer`` and ``ModelStreamInfer`` message is checked (:mod:`.grpc_checks`) before Triton
  sees it, against the model's ``max_batch_size`` (its config, read once from Triton's HTTP endpoint
  and cached): a refusal is the call's status (INVALID_ARGUMENT) with a one-line message;
* a message not whole within ``request_timeout`` of its first byte is refused (its budget freed);
* every other method, streaming ones included, passes as it is: Triton applies its restricted-API
  keys (``--grpc-restricted-protocol``) to the headers the guard relays unchanged;
* :meth:`GrpcGuard.drain` stops accepting, sends each client GOAWAY (streams past the last one opened
  are refused, REFUSED_STREAM) and waits for the calls in flight; :meth:`GrpcGuard.hold` (a restart)
  answers new calls UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from tritonkit.serve.connection import trim_heap
from tritonkit.serve.grpc_checks import RESOURCE_EXHAUSTED, CallRefusedError
from tritonkit.serve.grpc_relay import ClientSide, ConfigMissingError
from tritonkit.serve.guard import _event_loop, bind_error, call_on_loop

__all__ = ["GrpcGuard"]

#: entries the config cache keeps (model names come from clients: the cache is bounded)
_CONFIGS = 1024
_SWEEP_S = 1.0


class GrpcGuard:
    """Listen on ``host:port`` and relay gRPC to Triton at ``127.0.0.1:upstream``.

    ``config_url()`` is the base URL of Triton's HTTP endpoint, where a model's config is read for its
    ``max_batch_size`` (``headers`` go with it: the admin key, where ``model-config`` is restricted).
    """

    def __init__(
        self,
        host: str,
        port: int,
        upstream: int,
        *,
        max_message_bytes: int,
        max_inflight_bytes: int | None = None,
        max_connection_bytes: int | None = None,
        config_url: Callable[[], str] | None = None,
        headers: dict[str, str] | None = None,
        request_timeout: float = 60.0,
        max_connections: int = 16384,
    ) -> None:
        self.host, self.port, self.upstream = host, port, upstream
        self.max_message_bytes = max_message_bytes
        self.max_inflight_bytes = max_inflight_bytes or 4 * max_message_bytes
        self.max_connection_bytes = max(
            max_connection_bytes or max_message_bytes + (1 << 20), max_message_bytes
        )
        self.config_url = config_url
        self.headers = dict(headers or {})
        self.request_timeout = request_timeout
        self.max_connections = max_connections
        self.refused = 0  # calls refused
        self.buffered = 0  # message bytes reserved across connections
        self._peak = 0
        self.in_flight = 0  # calls open across connections
        self.held: str | None = None
        self.draining = False
        self.connections: set[ClientSide] = set()
        self._configs: dict[tuple[str, str], int | None] = {}
        self._fetching: dict[tuple[str, str], list[Callable[[], None]]] = {}
        self._loop = _event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="tritonkit-grpc-guard", daemon=True
        )

    # --- life cycle (called from other threads) ------------------------------------------------
    def start(self) -> None:
        self._thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(timeout=10)
        except OSError as exc:  # taken since serve checked it: one line, as the HTTP guard's
            self.close()
            raise bind_error("grpc", self.host, self.port, exc) from None

    async def _listen(self) -> None:
        self._server = await self._loop.create_server(
            lambda: ClientSide(self), self.host, self.port, reuse_address=True, backlog=1024
        )
        self._loop.call_later(_SWEEP_S, self._sweep)

    def _sweep(self) -> None:
        now = time.monotonic()
        for connection in list(self.connections):
            connection.sweep(now, self.request_timeout)
        if not self.draining:
            self._loop.call_later(_SWEEP_S, self._sweep)

    def _call(self, function: Callable[[], object]) -> None:
        call_on_loop(self._loop, self._thread, function)

    def hold(self, reason: str) -> None:
        """Answer new calls UNAVAILABLE (``reason``) and refuse new connections until :meth:`release`."""

        def apply() -> None:
            self.held = reason

        self._call(apply)

    def release(self, upstream: int) -> None:
        """Serve again, now from Triton at ``127.0.0.1:upstream`` (configs read again)."""

        def apply() -> None:
            self.upstream, self.held = upstream, None
            self._configs.clear()

        self._call(apply)

    def drain(self, timeout: float) -> int:
        """Stop accepting, GOAWAY every client, wait for the calls in flight; returns those left."""
        if not self._thread.is_alive():
            return 0
        return asyncio.run_coroutine_threadsafe(self._drain(timeout), self._loop).result(timeout=timeout + 5)

    async def _drain(self, timeout: float) -> int:
        self.draining = True
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.goaway(0)
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
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- the budget (event-loop thread only) ----------------------------------------------------
    def take(self, size: int) -> None:
        if self.buffered + size > self.max_inflight_bytes:
            raise CallRefusedError(
                RESOURCE_EXHAUSTED,
                f"gRPC messages in flight hold over {self.max_inflight_bytes} bytes; retry later",
            )
        self.buffered += size
        self._peak = max(self._peak, self.buffered)

    def give(self, size: int) -> None:
        self.buffered -= size
        if self.buffered == 0 and self._peak > 32 << 20:
            self._peak = 0
            trim_heap()

    # --- model configs (event-loop thread only) --------------------------------------------------
    def max_batch(self, model: str, version: str) -> int | None:
        """The model's ``max_batch_size`` where cached; raises :class:`ConfigMissingError` to fetch it."""
        if self.config_url is None or len(model) > 256 or len(version) > 20:
            return None  # Triton answers for a name no model has
        key = (model, version)
        try:
            return self._configs[key]
        except KeyError:
            raise ConfigMissingError(key) from None

    def fetch_config(self, key: tuple[str, str], then: Callable[[], None]) -> None:
        """Read the model's config from Triton (a worker thread), cache its batch size, call ``then``."""
        waiting = self._fetching.get(key)
        if waiting is not None:
            waiting.append(then)
            return
        self._fetching[key] = [then]
        assert self.config_url is not None
        url, headers = self.config_url(), self.headers
        future = self._loop.run_in_executor(None, _read_max_batch, url, headers, *key)

        def done(result: asyncio.Future[tuple[int | None, bool]]) -> None:
            value, keep = result.result() if not result.cancelled() else (None, False)
            if len(self._configs) >= _CONFIGS:
                self._configs.clear()
            self._configs[key] = value  # kept once at least, so the waiting calls go on
            for call in self._fetching.pop(key, []):
                call()
            if not keep:
                self._configs.pop(key, None)

        future.add_done_callback(done)


def _read_max_batch(base: str, headers: dict[str, str], model: str, version: str) -> tuple[int | None, bool]:
    """(``max_batch_size`` or None where Triton has no such model, whether to keep the answer)."""
    path = f"/v2/models/{urllib.parse.quote(model, safe='')}"
    if version:
        path += f"/versions/{urllib.parse.quote(version, safe='')}"
    request = urllib.request.Request(f"{base}{path}/config", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            config = json.loads(response.read(1 << 22))
    except urllib.error.HTTPError:
        return None, False  # no such model (yet): Triton answers the call
    except (OSError, ValueError):
        return None, False
    value = config.get("max_batch_size", 0) if isinstance(config, dict) else 0
    return (value if isinstance(value, int) else 0), True
