"""The gRPC guard's share of :class:`~tritonkit.serve.embedded.EmbeddedServer` (a mixin).

With ``grpc_guard`` (by default as ``guard``) Triton's gRPC endpoint listens on a private loopback port
and :class:`~tritonkit.serve.grpc_guard.GrpcGuard` takes the public one: its message cap is the
server's ``max_body_bytes``, its budget across connections ``max_inflight_bytes`` (both of its
:class:`~tritonkit.serve.options.ServerOptions`), and it reads each
model's ``max_batch_size`` from Triton's HTTP endpoint (with the admin key).
"""

from __future__ import annotations

from tritonkit.serve.grpc_guard import GrpcGuard
from tritonkit.serve.install import free_port
from tritonkit.serve.options import ServerOptions

__all__ = ["GrpcFront"]


class GrpcFront:
    """Starts, holds, releases, drains and closes the gRPC guard of an embedded server."""

    options: ServerOptions
    _grpc: GrpcGuard | None = None
    _triton_grpc_port: int | None = None

    def _port_of_triton_http(self) -> int:  # EmbeddedServer's
        raise NotImplementedError

    def is_running(self) -> bool:  # EmbeddedServer's
        raise NotImplementedError

    def _pick_grpc_port(self) -> None:
        """Triton's private gRPC port, where the guard takes the public one."""
        self._triton_grpc_port = free_port() if self.options.guards_grpc else None

    def _open_grpc(self, port: int, headers: dict[str, str]) -> None:
        """Start the guard on the public ``port``; ``headers`` unlock Triton's restricted APIs."""
        options = self.options
        if not options.guards_grpc or self._triton_grpc_port is None:
            return
        local = "127.0.0.1" if options.host in ("0.0.0.0", "") else options.host
        self._grpc = GrpcGuard(
            options.host,
            port,
            self._triton_grpc_port,
            max_message_bytes=options.max_body_bytes,
            max_inflight_bytes=options.inflight_bytes,
            config_url=lambda: f"http://{local}:{self._port_of_triton_http()}",
            headers=headers,
            request_timeout=options.request_timeout,
        )
        self._grpc.start()

    def _hold_grpc(self, reason: str) -> None:
        if self._grpc is not None:
            self._grpc.hold(reason)

    def _release_grpc(self) -> None:
        if self._grpc is not None and self._triton_grpc_port is not None:
            self._grpc.release(self._triton_grpc_port)

    def _drain_grpc(self) -> None:
        if self._grpc is not None and self.is_running():
            self._grpc.drain(self.options.exit_timeout)

    def _close_grpc(self) -> None:
        if self._grpc is not None:
            self._grpc.close()
            self._grpc = None

    @property
    def grpc_refused(self) -> int:
        """Calls the gRPC guard refused (0 without one)."""
        return self._grpc.refused if self._grpc is not None else 0
