"""Python-backend ``model.py`` files that versions carry, kept as plain copyable source files.

Each module here is a self-contained Triton python-backend model (it imports only what the stub's
interpreter has: ``triton_python_backend_utils``, NumPy, ONNX Runtime, ...). Builders copy one into
``<model>/<version>/model.py``; nothing in tritonkit imports them. The GPU runners share their general
request path, ``gpu_requests.py``, copied beside them (the stub puts the version folder on ``sys.path``),
and the torch runner its host-time statistics and profiler, ``host_stats.py``;
:func:`load_runner` imports a runner the same way for tests and benchmarks that run its engine in-process.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["GPU_REQUESTS", "HOST_STATS", "ONNX_RUNNER", "RUNNER_DIR", "load_runner", "runner_path"]

RUNNER_DIR = Path(__file__).resolve().parent
#: Runs an ONNX artifact with ONNX Runtime (see ``onnx_runner.py``).
ONNX_RUNNER = "onnx_runner"
#: The general request path of the GPU runners, copied beside their ``model.py`` under this name.
GPU_REQUESTS = "gpu_requests"
#: The torch runner's host-time statistics and profiler of executes, copied beside its ``model.py``.
HOST_STATS = "host_stats"


def runner_path(name: str = ONNX_RUNNER) -> Path:
    """Path of the runner source ``<name>.py`` in this package; FileNotFoundError if there is none."""
    path = RUNNER_DIR / f"{name}.py"
    if name.startswith("_") or not path.is_file():
        raise FileNotFoundError(f"no runner named {name!r} in {RUNNER_DIR}")
    return path


def load_runner(name: str) -> ModuleType:
    """The runner ``<name>.py`` imported as a module (not registered in ``sys.modules``), with its
    folder on ``sys.path`` as the stub has the version folder, so its sibling imports resolve."""
    spec = importlib.util.spec_from_file_location(f"tritonkit_runner_{name}", runner_path(name))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    if str(RUNNER_DIR) not in sys.path:
        sys.path.append(str(RUNNER_DIR))
    spec.loader.exec_module(module)
    return module
