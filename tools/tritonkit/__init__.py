"""tritonkit: Triton Inference Server model repository tooling for T4-first GPU fleets.

Owns nothing itself; re-exports the exception root and the package version. Subpackages:
``config`` (model configuration), ``repository`` (versioned layout), ``server`` (embedded Triton),
``client`` (tritonclient twins), ``convert`` (ONNX/TensorRT builds), ``loadtest`` (Locust), ``k8s``.
"""

from __future__ import annotations

from tritonkit.errors import TritonKitError

__all__ = ["TritonKitError", "__version__"]
__version__ = "0.1.0"
