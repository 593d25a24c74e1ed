"""Options of the embedded server: defaults, the flags every tritonkit server runs with (embedded or
deployed), the API groups Triton knows, range checks, and :class:`ServerOptions`, the one description of a
server from which its ``tritonserver`` command line is derived."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

from tritonkit.errors import ServerError

__all__ = [
    "ADMIN_HEADER",
    "DEFAULT_LOG_MAX_BYTES",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_RESTRICTED_APIS",
    "KNOWN_APIS",
    "SERVER_FLAGS",
    "SERVER_SWITCHES",
    "ServerOptionError",
    "ServerOptions",
    "check_options",
    "server_flags",
]

#: API groups restricted by default; calling them needs the admin header (see ``EmbeddedServer.admin_key``).
#: ``shared-memory``: a caller could register any ``/dev/shm`` region of this user as an output (the
#: python stubs' own regions included, whose names ``ps`` shows) and have Triton overwrite it.
#: ``statistics`` stays open: NVIDIA's tools read it (the tritonclient infer examples, perf_analyzer,
#: Model Analyzer) and ``/metrics`` publishes the same counts without a key.
DEFAULT_RESTRICTED_APIS: tuple[str, ...] = (
    "model-repository",
    "shared-memory",
    "trace",
    "logging",
)
#: The tritonserver flags every tritonkit server runs with, described once: the embedded server writes
#: them (:meth:`ServerOptions.triton_args`; its ``model_control_mode``, ``strict_readiness`` and ``exit_on_error``
#: options replace the first three) and ``tritonkit k8s check`` requires each in a deployment, exactly once
#: with this value (``deploy.checks.server``; a fleet group's pod may run ``explicit`` with the models it
#: loads at start named). No model loaded or unloaded after the start, ready only when every model is, exit
#: when a model fails to load, no SageMaker or Vertex AI front end.
SERVER_FLAGS: Mapping[str, str] = MappingProxyType(
    {
        "--model-control-mode": "none",
        "--strict-readiness": "true",
        "--exit-on-error": "true",
        "--allow-sagemaker": "false",
        "--allow-vertex-ai": "false",
    }
)
#: Flags without a value every tritonkit server runs with: each config as written, never completed by Triton.
SERVER_SWITCHES: tuple[str, ...] = ("--disable-auto-complete-config",)


def server_flags(
    model_control_mode: str = "none", strict_readiness: bool = True, exit_on_error: bool = True
) -> list[str]:
    """:data:`SERVER_FLAGS` and :data:`SERVER_SWITCHES` as arguments, with the embedded server's options."""
    given = {
        "--model-control-mode": model_control_mode,
        "--strict-readiness": str(strict_readiness).lower(),
        "--exit-on-error": str(exit_on_error).lower(),
    }
    flags = [f"{flag}={given.get(flag, value)}" for flag, value in SERVER_FLAGS.items()]
    return [*flags, *SERVER_SWITCHES]


#: Every API group Triton 2.51 accepts in ``--http-restricted-api``/``--grpc-restricted-protocol``.
KNOWN_APIS: tuple[str, ...] = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)
#: Largest HTTP body the guard forwards (``guard=True``); Triton 2.51 itself has no such limit.
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
#: Bytes the server log keeps per file (two files: the log and ``<log>.1``); Triton never rotates it.
DEFAULT_LOG_MAX_BYTES = 64 * 1024 * 1024
#: Header that carries the key for restricted APIs.
ADMIN_HEADER = "tritonkit-admin-key"


class ServerOptionError(ServerError):
    """A :class:`ServerOptions` value is out of range (a usage error: exit code 2)."""

    exit_code = 2


def check_options(
    ports: dict[str, int | None],
    *,
    exit_timeout: int,
    startup_timeout: float,
    apis: Sequence[str],
    max_body_bytes: int,
    log_max_bytes: int,
) -> None:
    """Refuse out-of-range options with one line naming expected and given values."""
    for role, port in ports.items():
        if port is not None and not 1 <= port <= 65535:
            raise ServerOptionError(f"{role} port must be 1-65535, given {port}")
    if exit_timeout < 0:
        raise ServerOptionError(f"exit timeout must be 0 or more seconds, given {exit_timeout}")
    if not startup_timeout > 0:
        raise ServerOptionError(f"startup timeout must be more than 0 seconds, given {startup_timeout:g}")
    unknown = [api for api in apis if api not in KNOWN_APIS]
    if unknown:
        raise ServerOptionError(
            f"unknown restricted API {', '.join(map(repr, unknown))}; expected some of {', '.join(KNOWN_APIS)}"
        )
    if max_body_bytes < 1:
        raise ServerOptionError(f"max body bytes must be 1 or more, given {max_body_bytes}")
    if log_max_bytes < 4096:
        raise ServerOptionError(f"log max bytes must be 4096 or more, given {log_max_bytes}")


@dataclasses.dataclass(frozen=True)
class ServerOptions:
    """How an :class:`~tritonkit.serve.embedded.EmbeddedServer` runs, checked once when made (one line,
    :class:`ServerOptionError`); :meth:`triton_args` derives tritonserver's arguments from it.

    Ports left as ``None`` are picked free at the start. Listeners bind ``host`` (loopback by default).
    Defaults follow Triton's secure-deployment guide: ``--model-control-mode=none``, strict readiness,
    auto-complete disabled, and :data:`DEFAULT_RESTRICTED_APIS` behind the ``tritonkit-admin-key`` header
    (``admin_key``; default a random one per server). Override with :func:`dataclasses.replace`.
    """

    http_port: int | None = None
    grpc_port: int | None = None
    metrics_port: int | None = None
    host: str = "127.0.0.1"
    #: the server log (default: a temporary file, removed with the server)
    log_file: str | os.PathLike[str] | None = None
    startup_timeout: float = 120.0
    #: seconds in-flight requests get on stop
    exit_timeout: int = 30
    log_verbose: int = 0
    model_control_mode: str = "none"
    strict_readiness: bool = True
    exit_on_error: bool = True
    restricted_apis: Sequence[str] = DEFAULT_RESTRICTED_APIS
    admin_key: str | None = None
    response_cache_bytes: int = 0
    metrics: bool = True
    #: tritonserver arguments written after tritonkit's own
    extra_args: Sequence[str] = ()
    #: Put :class:`~tritonkit.serve.guard.Guard` on the HTTP port (limits, drain, true readiness).
    guard: bool = False
    #: Put :class:`~tritonkit.serve.grpc_guard.GrpcGuard` on the gRPC port (None: as ``guard``).
    grpc_guard: bool | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    #: Body bytes the guards hold across all connections at once (None: 4 x ``max_body_bytes``).
    max_inflight_bytes: int | None = None
    #: Seconds the guard gives a request (head and body) from its first byte.
    request_timeout: float = 60.0
    #: The log keeps at most this many bytes in ``log_file`` and as many in ``log_file.1``.
    log_max_bytes: int = DEFAULT_LOG_MAX_BYTES
    #: Probe each python model with a tiny infer (:mod:`tritonkit.serve.health`) so that the guard's
    #: readiness tells a stopped or hung stub (None: with the guard, in model control mode ``none``).
    health_probes: bool | None = None

    def __post_init__(self) -> None:
        # tuples and a Path: the options stay as made (a list given stays the caller's to change)
        object.__setattr__(self, "restricted_apis", tuple(self.restricted_apis))
        object.__setattr__(self, "extra_args", tuple(self.extra_args))
        if self.log_file is not None:
            object.__setattr__(self, "log_file", Path(self.log_file))
        check_options(
            {"http": self.http_port, "grpc": self.grpc_port, "metrics": self.metrics_port},
            exit_timeout=self.exit_timeout,
            startup_timeout=self.startup_timeout,
            apis=self.restricted_apis,
            max_body_bytes=self.max_body_bytes,
            log_max_bytes=self.log_max_bytes,
        )

    @property
    def guards_grpc(self) -> bool:
        """Whether the gRPC guard runs (``grpc_guard``, by default as ``guard``)."""
        return self.guard if self.grpc_guard is None else self.grpc_guard

    @property
    def inflight_bytes(self) -> int:
        """The guards' body budget across connections (``max_inflight_bytes``, by default 4 x the body cap)."""
        return self.max_inflight_bytes or 4 * self.max_body_bytes

    @property
    def probes_health(self) -> bool:
        """Whether each python model is probed (``health_probes``; by default with the guard, mode ``none``)."""
        if self.health_probes is None:
            return self.guard and self.model_control_mode == "none"
        return self.health_probes

    def triton_args(
        self,
        *,
        http_port: int,
        grpc_port: int,
        metrics_port: int | None,
        admin_key: str,
        caches: Path | None = None,
    ) -> list[str]:
        """tritonserver's arguments after the binary, repository and backend folder: the ports Triton itself
        listens on (private ones behind a guard), ``metrics_port`` when ``metrics``, the key of the restricted
        APIs, the wheel's cache folder. :data:`SERVER_FLAGS` are among them (:func:`server_flags`)."""
        args = [
            f"--http-address={'127.0.0.1' if self.guard else self.host}",
            f"--http-port={http_port}",
            f"--grpc-address={'127.0.0.1' if self.guards_grpc else self.host}",
            f"--grpc-port={grpc_port}",
            f"--allow-metrics={str(self.metrics).lower()}",
            *server_flags(self.model_control_mode, self.strict_readiness, self.exit_on_error),
            f"--exit-timeout-secs={self.exit_timeout}",
            f"--log-verbose={self.log_verbose}",
        ]
        if self.metrics:
            args += [f"--metrics-address={self.host}", f"--metrics-port={metrics_port}"]
        if caches is not None:
            args.append(f"--cache-directory={caches}")
        if self.response_cache_bytes > 0:
            args.append(f"--cache-config=local,size={self.response_cache_bytes}")
        if self.restricted_apis:
            spec = f"{','.join(self.restricted_apis)}:{ADMIN_HEADER}={admin_key}"
            args += [f"--http-restricted-api={spec}", f"--grpc-restricted-protocol={spec}"]
        return args + list(self.extra_args)
