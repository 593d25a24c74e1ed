"""The package's one exception hierarchy.

Every error a user can cause or meet derives from :class:`TritonKitError`. The CLI prints
``str(err)`` as a single line and exits non-zero; nothing below should need a traceback to be
understood. Messages say what was expected and what was given, and name fields in backticks.
Third-party exceptions are wrapped at the boundary (``raise XError(...) from None``).

Subsystems may define narrower subclasses next to their code, but always under one of the
roots below so callers can catch by area.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = [
    "AccuracyError",
    "BuildError",
    "CalibrationError",
    "ClientError",
    "ConfigError",
    "DeployError",
    "GpuProfileError",
    "LoadTestError",
    "ModelImportError",
    "ModelLoadError",
    "OptionError",
    "PortInUseError",
    "RepositoryError",
    "ServerError",
    "ServerNotInstalledError",
    "ServerStartTimeoutError",
    "SpecError",
    "TensorRTUnavailableError",
    "TritonKitError",
    "read_json",
    "read_text",
]


class TritonKitError(Exception):
    """Root of every error raised by tritonkit."""

    exit_code: int = 1


class OptionError(TritonKitError):
    """A library call's option has a value it cannot take: ``option`` names the field, ``given`` the
    value, ``expected`` what would do. A command names its own flag instead (:meth:`naming`)."""

    def __init__(self, option: str, given: object, expected: str) -> None:
        self.option, self.given, self.expected = option, given, expected
        super().__init__(self.naming(f"`{option}`"))

    def naming(self, name: str) -> str:
        """The message with the option called ``name`` (e.g. its command-line flag)."""
        return f"{name} {self.given}: expected {self.expected}"


# --- model configuration and repository -------------------------------------------------
class ConfigError(TritonKitError):
    """A model configuration (dataclass, protobuf or ``config.pbtxt``) is invalid."""


class RepositoryError(TritonKitError):
    """The model repository layout, a model name, or a version directory is wrong."""


class ModelImportError(TritonKitError):
    """A source model (ONNX file, torch module) is missing, malformed or unsupported."""


# --- embedded server -----------------------------------------------------------------------
class ServerError(TritonKitError):
    """The embedded Triton server could not start, serve or stop."""


class ServerNotInstalledError(ServerError):
    """The ``tritonserver`` binary (from the ``nvidia-pytriton`` wheel) is not available."""


class PortInUseError(ServerError):
    """A requested port is already bound by another process."""


class ModelLoadError(ServerError):
    """Triton failed to load one or more models; the message carries Triton's own line."""


class ServerStartTimeoutError(ServerError):
    """The server did not become ready within the startup timeout."""


# --- conversion and calibration ------------------------------------------------------------
class BuildError(TritonKitError):
    """A conversion or build step failed."""


class SpecError(BuildError):
    """A build spec (YAML) has unknown keys, wrong types or impossible values."""


class CalibrationError(BuildError):
    """Calibration data is missing, corrupt or too small."""


class AccuracyError(BuildError):
    """A converted model fell below its accuracy thresholds; nothing was written."""


class TensorRTUnavailableError(BuildError):
    """The TensorRT target was asked for but ``import tensorrt`` fails here."""


class GpuProfileError(BuildError):
    """A setting is impossible on the chosen GPU profile (e.g. BF16 on a T4)."""


# --- client, load tests, deployment ---------------------------------------------------------
class ClientError(TritonKitError):
    """Root of client-side errors; see :mod:`tritonkit.client` for the specific ones."""


class LoadTestError(TritonKitError):
    """A load test could not be configured or run."""


class DeployError(TritonKitError):
    """Kubernetes manifests could not be rendered or validated."""


def read_text(path: Path, error: type[TritonKitError], *, missing: str, unreadable: str) -> str:
    """``path``'s UTF-8 text; ``error(missing)`` when there is no such file, ``error("<unreadable>: <cause>")``
    when it cannot be read or decoded: file-system errors wrapped at the boundary like any other."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(missing) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{unreadable}: {exc}") from None


def read_json(path: Path, error: type[TritonKitError], *, missing: str, invalid: str) -> Any:
    """``path``'s JSON document: :func:`read_text`'s errors (``invalid`` as the unreadable text), and
    ``error("<invalid> (<cause>)")`` when it does not parse."""
    text = read_text(path, error, missing=missing, unreadable=invalid)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise error(f"{invalid} ({' '.join(str(exc).split())})") from None
