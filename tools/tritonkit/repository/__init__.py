"""The model repository: layout, names, every write into it, manifests, checks and ONNX I/O.

``store`` owns the on-disk layout (``<repo>/<model>/config.pbtxt``, ``<repo>/<model>/<version>/``), the
model-name rules and every write into a repository (versions, config write-back, cloned models) with
the one rule for what may be written; ``staging`` the lock and staging folders those writes use;
``signature`` what every version of a model shares and who last rewrote its config; ``manifest`` the
``build.json`` of a version; ``onnx_io`` reads an ONNX graph's inputs and outputs; ``check`` predicts
load failures without a server.
"""

from __future__ import annotations

from tritonkit.repository.manifest import MANIFEST_FILE, Manifest, sha256_file
from tritonkit.repository.staging import STAGING_PREFIX
from tritonkit.repository.store import (
    CONFIG_FILE,
    ModelRepository,
    Reservation,
    VersionWrite,
    validate_model_name,
)

__all__ = [
    "CONFIG_FILE",
    "MANIFEST_FILE",
    "STAGING_PREFIX",
    "Manifest",
    "ModelRepository",
    "Reservation",
    "VersionWrite",
    "sha256_file",
    "validate_model_name",
]
