"""Options of the embedded server: defaults, the flags every tritonkit server runs with (embedded or
deployed), the API groups Triton knows, and range checks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
#: them (``EmbeddedServer.command``; its ``model_control_mode``, ``strict_readiness`` and ``exit_on_error``
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
    """An :class:`EmbeddedServer` option is out of range (a usage error: exit code 2)."""

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
