"""The model repository: layout, names, atomic version writes, manifests, checks and ONNX I/O.

``store`` owns the on-disk layout (``<repo>/<model>/config.pbtxt``, ``<repo>/<model>/<version>/``), the
model-name rules, atomic version writes and ``build.json`` manifests; ``onnx_io`` reads an ONNX graph's
inputs and outputs; ``check`` predicts load failures without a server.
"""

from __future__ import annotations

from tritonkit.repository.store import (
    CONFIG_FILE,
    MANIFEST_FILE,
    STAGING_PREFIX,
    Manifest,
    ModelRepository,
    sha256_file,
    validate_model_name,
)

__all__ = [
    "CONFIG_FILE",
    "MANIFEST_FILE",
    "STAGING_PREFIX",
    "Manifest",
    "ModelRepository",
    "sha256_file",
    "validate_model_name",
]
