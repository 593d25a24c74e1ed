"""Where a measuring tool's load goes: the user's server (``url``) or an embedded one, as one :class:`Endpoint`.

Owns :func:`endpoint`, the one way ``profile``, ``tune``, ``compare``, ``loadtest`` and the benchmarks get
a server: given a ``url``, its other endpoints (HTTP for the model-repository and statistics APIs,
``/metrics``) are the ones named or Triton's default ports on the same host, and the admin key is the
one given; without one, an :class:`~tritonkit.serve.embedded.EmbeddedServer` starts on ``repo`` and
stops when the block ends, serving every model (``load`` None, model control ``none``) or, in
explicit model control, only the models in ``load`` (none: the caller loads them through the
repository API).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from tritonkit.errors import ServerError
from tritonkit.serve.embedded import EmbeddedServer, ServerOptions
from tritonkit.serve.options import ADMIN_HEADER

__all__ = ["Endpoint", "endpoint"]

#: Triton's default ports: where the other endpoints of a server named by one ``url`` are guessed
DEFAULT_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """A server's HTTP and gRPC ``host:port``, its ``/metrics`` URL and admin headers (and the embedded
    server, when one was started)."""

    http: str
    grpc: str
    metrics: str
    #: the ``/metrics`` URL was named (or is the embedded server's), so it must answer; a guessed one
    #: (Triton's default port on the url's host) may be closed
    metrics_named: bool
    #: the header that opens the restricted APIs (empty when no key is known)
    headers: dict[str, str]
    server: EmbeddedServer | None = None

    def url(self, protocol: str) -> str:
        """``host:port`` of ``protocol`` (``http`` or ``grpc``)."""
        return self.grpc if protocol == "grpc" else self.http


def _host_port(url: str) -> str:
    return re.sub(r"^[a-z]+://", "", url).rstrip("/")


def _on_port(url: str, port: int) -> str:
    host = _host_port(url)
    return f"{host.rsplit(':', 1)[0] if ':' in host else host}:{port}"


def _named(
    url: str, protocol: str, http_url: str | None, metrics_url: str | None, admin_key: str | None
) -> Endpoint:
    given = _host_port(url)
    guessed = {role: _on_port(given, port) for role, port in DEFAULT_PORTS.items()}
    guessed[protocol] = given
    return Endpoint(
        http=_host_port(http_url) if http_url else guessed["http"],
        grpc=guessed["grpc"],
        metrics=metrics_url or f"http://{guessed['metrics']}/metrics",
        metrics_named=metrics_url is not None,
        headers={ADMIN_HEADER: admin_key} if admin_key else {},
    )


@contextlib.contextmanager
def endpoint(
    url: str | None = None,
    *,
    protocol: str = "http",
    repo: str | os.PathLike[str] = "model_repository",
    http_url: str | None = None,
    metrics_url: str | None = None,
    admin_key: str | None = None,
    load: Sequence[str] | None = None,
    exit_timeout: int = 30,
    log_file: str | os.PathLike[str] | None = None,
) -> Iterator[Endpoint]:
    """The server at ``url`` (``host:port`` of ``protocol``), or an embedded one on ``repo`` for the block.

    ``load``: None serves every model of ``repo``; a sequence starts in explicit model control with
    only those models loaded. ``exit_timeout``: seconds the embedded server gives in-flight requests
    on stop. ``log_file``: where an embedded server writes its log (kept after the block; default a
    temporary file removed with it). Raises :class:`ServerError` when a model of ``load`` is not in
    ``repo`` (before anything starts) or the server cannot start.
    """
    if url is not None:
        yield _named(url, protocol, http_url, metrics_url, admin_key)
        return
    root = Path(repo)
    missing = [m for m in load or () if not (root / m / "config.pbtxt").is_file()]
    if missing and root.is_dir():
        raise ServerError(
            f"model `{missing[0]}` not found in {root}; expected {root}/{missing[0]}/config.pbtxt"
        )
    server = EmbeddedServer(
        root,
        ServerOptions(
            exit_timeout=exit_timeout,
            model_control_mode="none" if load is None else "explicit",
            extra_args=[f"--load-model={m}" for m in dict.fromkeys(load or ())],
            log_file=log_file,
        ),
    )
    with server:
        yield Endpoint(
            server.http_url, server.grpc_url, server.metrics_url, True, server.admin_headers, server
        )
