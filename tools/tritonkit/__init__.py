"""tritonkit: Triton Inference Server model repository tooling for T4-first GPU fleets.

Owns nothing itself; re-exports the exception root and the package version. Subpackages:
``config`` (model configuration), ``repository`` (versioned layout), ``serve`` (embedded Triton, runners),
``client`` (HTTP/gRPC twins), ``build`` (ONNX/TensorRT builds), ``loadtest`` (Locust), ``tune`` (measure, tune, plan), ``deploy`` (Kubernetes), ``commands`` (the CLI).
"""

from __future__ import annotations

from tritonkit.errors import TritonKitError

__all__ = ["TritonKitError", "__version__"]
__version__ = "0.1.0"
