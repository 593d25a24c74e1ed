"""``<model>/<version>/build.json``: where a version came from and how it was made (:class:`Manifest`),
with the versions of the tools that made it and the source's SHA-256."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tritonkit.errors import ModelImportError, RepositoryError

__all__ = ["MANIFEST_FILE", "MANIFEST_SCHEMA", "Manifest", "sha256_file"]

MANIFEST_FILE = "build.json"
MANIFEST_SCHEMA = 1
#: Distributions whose versions go into every manifest (those installed; none is imported for this).
_TOOL_DISTRIBUTIONS: tuple[str, ...] = (
    "tritonkit",
    "onnx",
    "onnxruntime",
    "onnxruntime-gpu",
    "numpy",
    "protobuf",
    "tritonclient",
    "nvidia-pytriton",
    "polygraphy",
    "torch",
    "tensorrt",
    "onnxscript",
)


def _tool_versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for dist in _TOOL_DISTRIBUTIONS:
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


@dataclass
class Manifest:
    """``<model>/<version>/build.json``: where a version came from and how it was made."""

    source: str
    source_sha256: str
    precision: str
    target: str
    gpu_profile: str | None = None
    tools: dict[str, str] = field(default_factory=dict)
    accuracy: dict[str, Any] | None = None
    created: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def create(
        cls,
        source_path: str | os.PathLike[str],
        precision: str = "fp32",
        target: str = "portable",
        gpu_profile: str | None = None,
        accuracy: Mapping[str, Any] | None = None,
        extra: Mapping[str, Any] | None = None,
        *,
        tools: Mapping[str, str] | None = None,
    ) -> Manifest:
        """Manifest for a version built now from ``source_path`` (hashed here).

        ``tools`` adds or overrides library versions (e.g. the TensorRT a plan was built with).
        """
        source = Path(source_path)
        try:
            digest = sha256_file(source)
        except FileNotFoundError:
            raise ModelImportError(
                f"source file not found: {str(source)!r}; expected an existing file"
            ) from None
        except IsADirectoryError:
            raise ModelImportError(f"source {str(source)!r} is a directory; expected a file") from None
        except OSError as exc:
            raise ModelImportError(f"cannot read source file {str(source)!r}: {exc.strerror}") from None
        return cls(
            source=str(source.resolve()),
            source_sha256=digest,
            precision=precision,
            target=target,
            gpu_profile=gpu_profile,
            tools={**_tool_versions(), **dict(tools or {})},
            accuracy=dict(accuracy) if accuracy is not None else None,
            created=datetime.now(UTC).isoformat(timespec="seconds"),
            extra=dict(extra or {}),
        )

    def to_json(self) -> str:
        data = {"schema": MANIFEST_SCHEMA, **asdict(self)}
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        """Parse ``build.json`` text; RepositoryError naming what is missing or malformed.

        Keys this version does not know are ignored, so newer manifests stay readable.
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RepositoryError(
                f"`{MANIFEST_FILE}` is not valid JSON ({exc.msg} at line {exc.lineno})"
            ) from None
        if not isinstance(data, dict):
            raise RepositoryError(f"`{MANIFEST_FILE}` must hold a JSON object, got {type(data).__name__}")
        required = ("source", "source_sha256", "precision", "target")
        missing = [key for key in required if key not in data]
        if missing:
            raise RepositoryError(f"`{MANIFEST_FILE}` lacks required keys: {', '.join(missing)}")
        known = {f for f in cls.__dataclass_fields__ if f in data}
        try:
            manifest = cls(**{key: data[key] for key in known})
        except TypeError as exc:  # pragma: no cover - every field has a default or is required above
            raise RepositoryError(f"`{MANIFEST_FILE}` is malformed: {exc}") from None
        for key in ("source", "source_sha256", "precision", "target"):
            if not isinstance(getattr(manifest, key), str):
                raise RepositoryError(f"`{MANIFEST_FILE}`: `{key}` must be a string")
        if not isinstance(manifest.tools, dict) or not isinstance(manifest.extra, dict):
            raise RepositoryError(f"`{MANIFEST_FILE}`: `tools` and `extra` must be JSON objects")
        return manifest
