"""tritonkit: Triton Inference Server model repository tooling for T4-first GPU fleets.

Owns nothing itself; re-exports the exception root and the package version. Modules and subpackages,
lowest layer first: ``backends`` (what Triton runs: the python-backend runners, the C++ backend),
``errors`` (the exception hierarchy), ``machine`` (naming the machine), ``atomic`` (the one atomic-write
helper), ``config`` (model configuration), ``serve`` (embedded Triton),
``repository`` (versioned layout and every write into it), ``convert`` (the build: spec to versions),
``deploy`` (Kubernetes), ``client`` (tritonclient twins), ``loadtest`` (Locust), ``tune`` (profile, tune,
compare, plan), ``commands`` and ``cli`` (the ``tritonkit`` command). The benchmarks are
``tritonkit_bench``, beside the package.
"""

from __future__ import annotations

from tritonkit.errors import TritonKitError

__all__ = ["TritonKitError", "__version__"]
__version__ = "0.1.0"
